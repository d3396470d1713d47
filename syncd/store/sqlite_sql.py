"""Every SQL statement of the SQLite store: the versioned schema and the named queries.

Conventions: datetimes are fixed-width ISO-8601 UTC text (so ``<`` on text is ``<`` in time),
JSON is text, enums are their string values. Lists of values travel as one JSON array
parameter expanded with ``json_each`` (no statement text built per call, no limit on the
number of values).
"""

from __future__ import annotations

from dataclasses import dataclass

from syncd.store.codec import CONNECTOR_COLUMNS, DOCUMENT_COLUMNS, RUN_COLUMNS


@dataclass(frozen=True)
class Migration:
    """One schema step; ``version`` is stored in ``PRAGMA user_version`` once applied."""

    version: int
    statements: tuple[str, ...]


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
)

# --- setup ------------------------------------------------------------------------------

PRAGMAS_PER_CONNECTION = (
    "PRAGMA foreign_keys = ON",
    # WAL + NORMAL: durable across application crashes; a power loss may lose the last
    # commits but never corrupts the file.
    "PRAGMA synchronous = NORMAL",
    # A larger page cache and in-memory temporary tables: page commits and claims touch the
    # same recent pages over and over.
    "PRAGMA cache_size = -65536",
    "PRAGMA temp_store = MEMORY",
    # Checkpoint the WAL every ~40 MB rather than every 4 MB: a crawl rewrites the same
    # index pages page after page, and each checkpoint copies them once, not once per commit.
    "PRAGMA wal_autocheckpoint = 10000",
)
JOURNAL_MODE_WAL = "PRAGMA journal_mode = WAL"
GET_USER_VERSION = "PRAGMA user_version"


def set_user_version(version: int) -> str:
    """``PRAGMA`` takes no bound parameters; ``version`` is an int from :data:`MIGRATIONS`."""
    return f"PRAGMA user_version = {int(version)}"


BEGIN_IMMEDIATE = "BEGIN IMMEDIATE"
PING = "SELECT 1"

# --- connectors -------------------------------------------------------------------------

_CONNECTOR_SELECT = f"SELECT {', '.join(CONNECTOR_COLUMNS)} FROM connectors"

INSERT_CONNECTOR = (
    f"INSERT INTO connectors ({', '.join(CONNECTOR_COLUMNS)}) "
    f"VALUES ({', '.join(':' + c for c in CONNECTOR_COLUMNS)})"
)
UPDATE_CONNECTOR = (
    "UPDATE connectors SET "
    + ", ".join(f"{c} = :{c}" for c in CONNECTOR_COLUMNS if c not in ("id", "created_at"))
    + " WHERE id = :id"
)
GET_CONNECTOR = f"{_CONNECTOR_SELECT} WHERE id = ?"
DUE_CONNECTORS = (
    f"{_CONNECTOR_SELECT} WHERE next_run_at <= ? AND status IN ('active', 'error') "
    "ORDER BY next_run_at, id LIMIT ?"
)
DELETE_CONNECTOR_DOCUMENTS = "DELETE FROM documents WHERE connector_id = ?"
DELETE_CONNECTOR_RUNS = "DELETE FROM runs WHERE connector_id = ?"
DELETE_CONNECTOR = "DELETE FROM connectors WHERE id = ?"


def list_connectors(*, by_status: bool, after: bool) -> str:
    """Connectors by id; parameters: ``[status], [after], limit``."""
    where = []
    if by_status:
        where.append("status = ?")
    if after:
        where.append("id > ?")
    clause = f" WHERE {' AND '.join(where)}" if where else ""
    return f"{_CONNECTOR_SELECT}{clause} ORDER BY id LIMIT ?"


# --- runs -------------------------------------------------------------------------------

_RUN_SELECT = f"SELECT {', '.join(RUN_COLUMNS)} FROM runs"

INSERT_RUN = (
    "INSERT INTO runs (id, connector_id, trigger, outcome, started_at, owner) "
    "VALUES (?, ?, ?, 'running', ?, ?)"
)
END_RUN = (
    "UPDATE runs SET outcome = ?, finished_at = ?, error = ? WHERE id = ? AND outcome = 'running'"
)
GET_RUN = f"{_RUN_SELECT} WHERE id = ?"
LIST_RUNS = f"{_RUN_SELECT} WHERE connector_id = ? ORDER BY id DESC LIMIT ?"
LIST_RUNS_BEFORE = f"{_RUN_SELECT} WHERE connector_id = ? AND id < ? ORDER BY id DESC LIMIT ?"

# --- run writes (fenced) ----------------------------------------------------------------

# The fence and the checkpoint in one statement: no row changed means "not the current run".
CHECKPOINT_PAGE = (
    "UPDATE connectors SET resume_cursor = ?, source_state = ?, "
    "progress_pages = progress_pages + 1, progress_documents = progress_documents + ?, "
    "sync_heartbeat_at = ? WHERE id = ? AND run_id = ?"
)
EXISTING_DOCUMENTS = (
    "SELECT external_id, content_hash, status, error FROM documents "
    "WHERE connector_id = ? AND external_id IN (SELECT value FROM json_each(?))"
)
# The documents syncd.rules.plan_page picks (new, changed, failed by an abort) alike become
# pending with a clean slate; a running one loses its lease, so the worker indexing the old
# content cannot record a result for it.
UPSERT_DOCUMENT = (
    "INSERT INTO documents (connector_id, external_id, status, content_hash, created_at, "
    "updated_at, attempts, payload, indexed_at) VALUES (?1, ?2, ?6, ?3, ?5, ?5, 0, ?4, "
    "CASE WHEN ?6 = 'indexed' THEN ?5 END) "
    "ON CONFLICT (connector_id, external_id) DO UPDATE SET status = excluded.status, "
    "content_hash = excluded.content_hash, payload = excluded.payload, error = NULL, "
    "attempts = 0, lease_token = NULL, lease_until = NULL, updated_at = excluded.updated_at, "
    "indexed_at = COALESCE(excluded.indexed_at, documents.indexed_at)"
)
# The sample of rejections is read and rewritten only when a page rejected records; a null
# sample or note leaves the column as it is.
RUN_REJECTIONS = "SELECT pages, rejections FROM runs WHERE id = ?"
COUNT_PAGE = (
    "UPDATE runs SET pages = pages + 1, documents_seen = documents_seen + ?, "
    "documents_enqueued = documents_enqueued + ?, documents_rejected = documents_rejected + ?, "
    "rejections = COALESCE(?, rejections), note = COALESCE(?, note) WHERE id = ?"
)
# The fence of a run's writes that do not checkpoint (e.g. its requeue of aborted documents):
# read under the write lock, so an abort cannot slip in before the write.
IS_CURRENT_RUN = "SELECT 1 FROM connectors WHERE id = ? AND run_id = ?"
REPORT = (
    "UPDATE connectors SET sync_heartbeat_at = ?, waiting_reason = ?, waiting_until = ? "
    "WHERE id = ? AND run_id = ?"
)

# --- documents --------------------------------------------------------------------------

_DOC_COLUMNS = ", ".join(DOCUMENT_COLUMNS)

GET_DOCUMENT = (
    f"SELECT {_DOC_COLUMNS}, payload FROM documents WHERE connector_id = ? AND external_id = ?"
)


def list_documents(*, by_status: bool, after: bool) -> str:
    """A connector's documents by external id; parameters: ``[status], connector_id,
    [after], limit``. With a status the ``documents_status`` index serves order and filter."""
    where = ["connector_id = ?"]
    if by_status:
        where.insert(0, "status = ?")
    if after:
        where.append("external_id > ?")
    return (
        f"SELECT {_DOC_COLUMNS} FROM documents WHERE {' AND '.join(where)} "
        "ORDER BY external_id LIMIT ?"
    )


# One covering-index range count per status, instead of reading every row of the connector.
DOCUMENT_COUNTS = (
    "SELECT s.value, (SELECT count(*) FROM documents d "
    "WHERE d.status = s.value AND d.connector_id = ?) FROM json_each(?) AS s"
)
PENDING_DOCUMENTS = (
    "SELECT connector_id, external_id FROM documents WHERE status = 'pending' "
    "ORDER BY connector_id, external_id LIMIT ?"
)
PENDING_DOCUMENTS_AFTER = (
    "SELECT connector_id, external_id FROM documents WHERE status = 'pending' "
    "AND (connector_id, external_id) > (?, ?) ORDER BY connector_id, external_id LIMIT ?"
)
_CLAIM = (
    "UPDATE documents SET status = 'running', lease_token = ?, lease_until = ?, "
    "attempts = attempts + 1, updated_at = ? WHERE status = 'pending' AND connector_id = ? "
    "AND external_id IN (SELECT value FROM json_each(?)) "
)
CLAIM_DOCUMENTS = f"{_CLAIM}RETURNING {_DOC_COLUMNS}, payload"
CLAIM_DOCUMENTS_NO_PAYLOAD = f"{_CLAIM}RETURNING {_DOC_COLUMNS}"
FINISH_DOCUMENT = (
    "UPDATE documents SET status = ?1, error = ?2, "
    "indexed_at = CASE WHEN ?1 = 'indexed' THEN ?3 ELSE indexed_at END, updated_at = ?3, "
    "lease_token = NULL, lease_until = NULL "
    "WHERE connector_id = ?4 AND external_id = ?5 AND status = 'running' AND lease_token = ?6"
)
EXTEND_LEASES = (
    "UPDATE documents SET lease_until = ? "
    "WHERE status = 'running' AND connector_id = ? AND lease_token = ?"
)
RELEASE_EXPIRED_LEASES = (
    "UPDATE documents SET status = 'pending', lease_token = NULL, lease_until = NULL, "
    "updated_at = ? WHERE status = 'running' AND lease_until <= ? "
    "RETURNING connector_id, external_id"
)
FAIL_DOCUMENTS = (
    "UPDATE documents SET status = 'failed', error = ?, lease_token = NULL, "
    "lease_until = NULL, updated_at = ? "
    "WHERE status IN (SELECT value FROM json_each(?)) AND connector_id = ?"
)
REQUEUE_DOCUMENTS = (
    "UPDATE documents SET status = 'pending', attempts = 0, error = NULL, updated_at = ? "
    "WHERE status = 'failed' AND connector_id = ? RETURNING external_id"
)
REQUEUE_DOCUMENTS_WITH_ERROR = (
    "UPDATE documents SET status = 'pending', attempts = 0, error = NULL, updated_at = ? "
    "WHERE status = 'failed' AND connector_id = ? AND error = ? RETURNING external_id"
)
