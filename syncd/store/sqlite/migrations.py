"""The SQLite store's schema: its versioned migrations and how they are recorded.

Applied in order by :class:`~syncd.store.sqlite.connection.SQLiteDatabase` when it opens the file,
under the database's write lock (two processes opening a new file migrate it once), each
exactly once; the version applied is kept in ``PRAGMA user_version``. Never edit a released
migration: a change to the schema is a new version.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Migration:
    """One schema step; ``version`` is stored in ``PRAGMA user_version`` once applied."""

    version: int
    statements: tuple[str, ...]


# The bodies of the document count triggers (migration 8).
_COUNT_NEW = (
    "INSERT INTO document_counts (connector_id, status, n) VALUES (new.connector_id, "
    "new.status, 1) ON CONFLICT (connector_id, status) DO UPDATE SET n = n + 1"
)
_UNCOUNT_OLD = (
    "UPDATE document_counts SET n = n - 1 "
    "WHERE connector_id = old.connector_id AND status = old.status"
)

MIGRATIONS: tuple[Migration, ...] = (
    Migration(
        1,
        (
            """
            CREATE TABLE connectors (
                id                 TEXT PRIMARY KEY,
                name               TEXT NOT NULL UNIQUE,
                source             TEXT NOT NULL,
                indexer            TEXT NOT NULL,
                created_at         TEXT NOT NULL,
                updated_at         TEXT NOT NULL,
                sync_schedule      TEXT,
                sync_timezone      TEXT,
                page_retries       INTEGER NOT NULL,
                page_retry_backoff REAL NOT NULL,
                throttle_seconds   REAL NOT NULL,
                retry_on_status    TEXT NOT NULL,
                status             TEXT NOT NULL,
                sync_status        TEXT NOT NULL,
                last_error         TEXT,
                run_id             TEXT,
                sync_started_at    TEXT,
                last_synced_at     TEXT,
                next_run_at        TEXT,
                sync_owner         TEXT,
                sync_heartbeat_at  TEXT,
                progress_pages     INTEGER NOT NULL DEFAULT 0,
                progress_documents INTEGER NOT NULL DEFAULT 0,
                waiting_reason     TEXT,
                waiting_until      TEXT,
                resume_cursor      TEXT,
                source_state       TEXT NOT NULL DEFAULT '{}'
            )
            """,
            # The scheduler tick's "what is due" query; (next_run_at, id) is also its order.
            "CREATE INDEX connectors_next_run_at ON connectors (next_run_at, id)",
            """
            CREATE TABLE runs (
                id                 TEXT PRIMARY KEY,
                connector_id       TEXT NOT NULL REFERENCES connectors (id) ON DELETE CASCADE,
                trigger            TEXT NOT NULL,
                outcome            TEXT NOT NULL,
                started_at         TEXT NOT NULL,
                finished_at        TEXT,
                pages              INTEGER NOT NULL DEFAULT 0,
                documents_seen     INTEGER NOT NULL DEFAULT 0,
                documents_enqueued INTEGER NOT NULL DEFAULT 0,
                error              TEXT,
                owner              TEXT
            )
            """,
            "CREATE INDEX runs_connector_id ON runs (connector_id, id)",
            # A rowid table, not WITHOUT ROWID: payloads are often larger than the ~200 bytes
            # up to which SQLite recommends WITHOUT ROWID.
            """
            CREATE TABLE documents (
                connector_id TEXT NOT NULL REFERENCES connectors (id) ON DELETE CASCADE,
                external_id  TEXT NOT NULL,
                status       TEXT NOT NULL,
                content_hash TEXT NOT NULL,
                created_at   TEXT NOT NULL,
                updated_at   TEXT NOT NULL,
                error        TEXT,
                attempts     INTEGER NOT NULL DEFAULT 0,
                indexed_at   TEXT,
                lease_token  TEXT,
                lease_until  TEXT,
                payload      TEXT NOT NULL,
                PRIMARY KEY (connector_id, external_id)
            )
            """,
            # Covers per-status work: pending_documents (across connectors, in key order),
            # expired leases, counts and status-filtered listings of one connector.
            "CREATE INDEX documents_status ON documents (status, connector_id, external_id)",
        ),
    ),
    # Rejected records and a note on runs. Payloads were already JSON text.
    Migration(
        2,
        (
            "ALTER TABLE runs ADD COLUMN documents_rejected INTEGER NOT NULL DEFAULT 0",
            "ALTER TABLE runs ADD COLUMN rejections TEXT NOT NULL DEFAULT '[]'",
            "ALTER TABLE runs ADD COLUMN note TEXT",
        ),
    ),
    # Deletions (DESIGN.md §11): the connector's prune settings, its crawl and held
    # deletions; runs count deletions; documents carry their pending operation and whether
    # the guard holds their deletion. What a full crawl saw is kept as one row per page (its
    # external ids), not as a stamp on each document: a re-crawl of unchanged documents then
    # writes one small row per page instead of rewriting every document. Tombstones are
    # purged by age: a partial index finds them.
    Migration(
        3,
        (
            "ALTER TABLE connectors ADD COLUMN prune INTEGER NOT NULL DEFAULT 1",
            "ALTER TABLE connectors ADD COLUMN prune_max_fraction REAL NOT NULL DEFAULT 0.5",
            "ALTER TABLE connectors ADD COLUMN full_crawl_schedule TEXT",
            "ALTER TABLE connectors ADD COLUMN deletions_held INTEGER NOT NULL DEFAULT 0",
            "ALTER TABLE connectors ADD COLUMN crawl_id TEXT",
            "ALTER TABLE connectors ADD COLUMN crawl_full INTEGER NOT NULL DEFAULT 0",
            "ALTER TABLE connectors ADD COLUMN next_full_crawl_at TEXT",
            "ALTER TABLE runs ADD COLUMN deleted INTEGER NOT NULL DEFAULT 0",
            "ALTER TABLE runs ADD COLUMN deletions_held INTEGER NOT NULL DEFAULT 0",
            "ALTER TABLE documents ADD COLUMN op TEXT NOT NULL DEFAULT 'index'",
            "ALTER TABLE documents ADD COLUMN held INTEGER NOT NULL DEFAULT 0",
            "CREATE INDEX documents_deleted ON documents (updated_at) WHERE status = 'deleted'",
            """
            CREATE TABLE crawl_pages (
                connector_id TEXT NOT NULL REFERENCES connectors (id) ON DELETE CASCADE,
                crawl_id     TEXT NOT NULL,
                ids          TEXT NOT NULL
            )
            """,
            "CREATE INDEX crawl_pages_crawl ON crawl_pages (connector_id, crawl_id)",
        ),
    ),
    # The record fields a connector's content hash covers: a JSON array, NULL for all.
    Migration(4, ("ALTER TABLE connectors ADD COLUMN hash_fields TEXT",)),
    # Instance heartbeats (GET /status): one row per process incarnation (its owner).
    Migration(
        5,
        (
            """
            CREATE TABLE instances (
                owner        TEXT PRIMARY KEY,
                info         TEXT NOT NULL,
                heartbeat_at TEXT NOT NULL
            )
            """,
            "CREATE INDEX instances_heartbeat_at ON instances (heartbeat_at)",
        ),
    ),
    # What a source keeps across runs and restarts (a rotated OAuth2 refresh token).
    Migration(6, ("ALTER TABLE connectors ADD COLUMN secret_state TEXT NOT NULL DEFAULT '{}'",)),
    # Admission control: a manual trigger that found no free run slot is stored (queued) with
    # its time; a partial index finds the queued ones in that order.
    Migration(
        7,
        (
            "ALTER TABLE connectors ADD COLUMN sync_queued_at TEXT",
            "CREATE INDEX connectors_sync_queued_at ON connectors (sync_queued_at, id) "
            "WHERE sync_queued_at IS NOT NULL",
        ),
    ),
    # Document counts per connector and status, kept by
    # triggers in the transaction of every statement that inserts, deletes or changes the
    # status of a document (one home for the rule, whatever statement writes), so that a
    # read of a connector never counts its documents. Rows may hold 0; delete_connector
    # removes its connector's rows. The migration counts the documents already stored.
    Migration(
        8,
        (
            """
            CREATE TABLE document_counts (
                connector_id TEXT NOT NULL,
                status       TEXT NOT NULL,
                n            INTEGER NOT NULL,
                PRIMARY KEY (connector_id, status)
            ) WITHOUT ROWID
            """,
            f"""
            CREATE TRIGGER documents_counted_insert AFTER INSERT ON documents BEGIN
                {_COUNT_NEW};
            END
            """,
            f"""
            CREATE TRIGGER documents_counted_delete AFTER DELETE ON documents BEGIN
                {_UNCOUNT_OLD};
            END
            """,
            # An upsert that updates fires this one, not the insert trigger. One statement
            # for both rows: each statement of a trigger costs per document written.
            """
            CREATE TRIGGER documents_counted_update AFTER UPDATE OF status ON documents
            WHEN old.status IS NOT new.status BEGIN
                INSERT INTO document_counts (connector_id, status, n)
                VALUES (old.connector_id, old.status, -1), (new.connector_id, new.status, 1)
                ON CONFLICT (connector_id, status) DO UPDATE SET n = n + excluded.n;
            END
            """,
            """
            INSERT INTO document_counts (connector_id, status, n)
            SELECT connector_id, status, count(*) FROM documents GROUP BY connector_id, status
            """,
        ),
    ),
    # The document shape a connector maps its records to (NULL: none), as JSON.
    Migration(9, ("ALTER TABLE connectors ADD COLUMN document TEXT",)),
    # Automatic retries of failed runs: the connector's budget and first wait, the failed
    # runs in a row and when the next retry is due; each run's attempt number.
    Migration(
        10,
        (
            "ALTER TABLE connectors ADD COLUMN retry_attempts INTEGER NOT NULL DEFAULT 3",
            "ALTER TABLE connectors ADD COLUMN retry_backoff REAL NOT NULL DEFAULT 30",
            "ALTER TABLE connectors ADD COLUMN failures INTEGER NOT NULL DEFAULT 0",
            "ALTER TABLE connectors ADD COLUMN retry_at TEXT",
            "ALTER TABLE runs ADD COLUMN attempt INTEGER NOT NULL DEFAULT 1",
        ),
    ),
    # Documents waiting to be retried (pending with a lease_until), found by the sweep.
    Migration(
        11,
        (
            "CREATE INDEX documents_retry_wait ON documents (lease_until) "
            "WHERE status = 'pending' AND lease_until IS NOT NULL",
        ),
    ),
    # New documents are counted by the page commit that inserts them (the only statement
    # that inserts documents: sql.COUNT_INSERTED), in one statement per page: the
    # insert trigger ran a program per document on the writer's thread, about 4 µs each,
    # which every claim and finish of the workers waited behind. Updates and deletes keep
    # their triggers.
    Migration(12, ("DROP TRIGGER IF EXISTS documents_counted_insert",)),
    # How a run's crawl ended (the rule that ended it) and the warnings about that end, a
    # JSON array of texts.
    Migration(
        13,
        (
            "ALTER TABLE runs ADD COLUMN end_reason TEXT",
            "ALTER TABLE runs ADD COLUMN warnings TEXT NOT NULL DEFAULT '[]'",
        ),
    ),
    # A document is deleted once enough complete full crawls in a row missed it (DESIGN.md
    # §12): each document counts the crawls that missed it (a partial index finds the few
    # that did); the connector keeps its setting (NULL: its pagination's default) and the
    # documents waiting for confirmation, each run those it left waiting.
    Migration(
        14,
        (
            "ALTER TABLE connectors ADD COLUMN prune_confirmations INTEGER",
            "ALTER TABLE connectors ADD COLUMN awaiting_confirmation INTEGER NOT NULL DEFAULT 0",
            "ALTER TABLE runs ADD COLUMN awaiting_confirmation INTEGER NOT NULL DEFAULT 0",
            "ALTER TABLE documents ADD COLUMN missed INTEGER NOT NULL DEFAULT 0",
            "CREATE INDEX documents_missed ON documents (connector_id, external_id) "
            "WHERE missed > 0",
        ),
    ),
    # The records a run's source read and left out (a backfill's past the end of its window).
    Migration(15, ("ALTER TABLE runs ADD COLUMN documents_filtered INTEGER NOT NULL DEFAULT 0",)),
)


GET_USER_VERSION = "PRAGMA user_version"


def set_user_version(version: int) -> str:
    """``PRAGMA`` takes no bound parameters; ``version`` is an int from :data:`MIGRATIONS`."""
    return f"PRAGMA user_version = {int(version)}"
