"""The PostgreSQL store's schema: its versioned migrations and how they are recorded.

Applied in order by :class:`~syncd.store.postgres.connection.PostgresDatabase` when it opens, under
a transaction-level advisory lock (several instances may start at once), each exactly once.
Never edit a released migration (``tests/unit/test_postgres_migrations.py`` pins each one's
text by its hash): a change to the schema is a new version. Migration 8 embeds the document
counters' trigger function from :mod:`syncd.store.postgres.counters_sql`.
"""

from __future__ import annotations

from typing import Final

from syncd.store.postgres import counters_sql as counters

MIGRATION_LOCK_KEY: Final = 0x73796E6364_01
"""Key of the transaction-level advisory lock held while migrations are applied."""

SCHEMA_VERSION_TABLE: Final = "syncd_schema_version"

CREATE_VERSION_TABLE: Final = f"""
CREATE TABLE IF NOT EXISTS {SCHEMA_VERSION_TABLE} (
    version    integer PRIMARY KEY,
    applied_at timestamptz NOT NULL DEFAULT now()
)"""

LOCK_MIGRATIONS: Final = "SELECT pg_advisory_xact_lock($1)"
CURRENT_VERSION: Final = f"SELECT coalesce(max(version), 0) FROM {SCHEMA_VERSION_TABLE}"
RECORD_VERSION: Final = f"INSERT INTO {SCHEMA_VERSION_TABLE} (version) VALUES ($1)"

# Versioned migrations, applied in order, each exactly once. Never edit a released one:
# append a new version instead.
MIGRATIONS: Final[tuple[tuple[int, str], ...]] = (
    (
        1,
        """
CREATE TABLE connectors (
    id                 text COLLATE "C" PRIMARY KEY,
    name               text NOT NULL,
    source             jsonb NOT NULL,
    indexer            jsonb NOT NULL,
    created_at         timestamptz NOT NULL,
    updated_at         timestamptz NOT NULL,
    sync_schedule      text,
    sync_timezone      text,
    page_retries       integer NOT NULL,
    page_retry_backoff double precision NOT NULL,
    throttle_seconds   double precision NOT NULL,
    retry_on_status    integer[] NOT NULL,
    status             text NOT NULL,
    sync_status        text NOT NULL,
    last_error         text,
    run_id             text,
    sync_started_at    timestamptz,
    last_synced_at     timestamptz,
    next_run_at        timestamptz,
    sync_owner         text,
    sync_heartbeat_at  timestamptz,
    progress_pages     bigint NOT NULL DEFAULT 0,
    progress_documents bigint NOT NULL DEFAULT 0,
    waiting_reason     text,
    waiting_until      timestamptz,
    resume_cursor      text,
    source_state       jsonb NOT NULL DEFAULT '{}',
    CONSTRAINT connectors_name_key UNIQUE (name)
);

-- The scheduler tick asks for due connectors: an index range scan, not a table scan.
CREATE INDEX connectors_next_run_at_idx ON connectors (next_run_at, id)
    WHERE next_run_at IS NOT NULL;

CREATE TABLE runs (
    id                 text COLLATE "C" PRIMARY KEY,
    connector_id       text COLLATE "C" NOT NULL
                       REFERENCES connectors (id) ON DELETE CASCADE,
    trigger            text NOT NULL,
    outcome            text NOT NULL,
    started_at         timestamptz NOT NULL,
    finished_at        timestamptz,
    pages              bigint NOT NULL DEFAULT 0,
    documents_seen     bigint NOT NULL DEFAULT 0,
    documents_enqueued bigint NOT NULL DEFAULT 0,
    error              text,
    owner              text
);

CREATE INDEX runs_connector_id_idx ON runs (connector_id, id);

-- No foreign key to connectors: its per-row check would tax the bulk page upsert, and
-- every write path already locks the connector row (commit_page is fenced on it) and
-- delete_connector removes documents explicitly.
CREATE TABLE documents (
    connector_id text COLLATE "C" NOT NULL,
    external_id  text COLLATE "C" NOT NULL,
    status       text NOT NULL,
    content_hash text NOT NULL,
    payload      jsonb,
    error        text,
    attempts     integer NOT NULL DEFAULT 0,
    created_at   timestamptz NOT NULL,
    updated_at   timestamptz NOT NULL,
    indexed_at   timestamptz,
    lease_token  text,
    lease_until  timestamptz,
    PRIMARY KEY (connector_id, external_id)
);

-- Counts per status, and listing one status in external id order.
CREATE INDEX documents_connector_status_idx ON documents (connector_id, status, external_id);

-- The lease sweeper only looks at running documents.
CREATE INDEX documents_lease_idx ON documents (lease_until) WHERE status = 'running';
""",
    ),
    (
        2,
        # Payloads become their canonical JSON text, as in SQLite: jsonb refuses "\u0000" in
        # strings, and text is cheaper to write (no parse on insert). Old rows keep jsonb's
        # rendering of the same value (every digit of a number is kept). Runs gain the count
        # and a sample of the records they rejected, and a note.
        """
ALTER TABLE documents ALTER COLUMN payload TYPE text USING payload::text;

ALTER TABLE runs
    ADD COLUMN documents_rejected bigint NOT NULL DEFAULT 0,
    ADD COLUMN rejections text NOT NULL DEFAULT '[]',
    ADD COLUMN note text;
""",
    ),
    (
        3,
        # Deletions (DESIGN.md §11): the connector's prune settings, its crawl and held
        # deletions; runs count deletions; documents carry their pending operation and
        # whether the guard holds their deletion. What a full crawl saw is kept as one row per
        # page (its external ids), not as a stamp on each document: a re-crawl of unchanged
        # documents then writes one small row per page instead of a new version of every
        # document. Tombstones are purged by age through a partial index.
        """
ALTER TABLE connectors
    ADD COLUMN prune boolean NOT NULL DEFAULT true,
    ADD COLUMN prune_max_fraction double precision NOT NULL DEFAULT 0.5,
    ADD COLUMN full_crawl_schedule text,
    ADD COLUMN deletions_held bigint NOT NULL DEFAULT 0,
    ADD COLUMN crawl_id text,
    ADD COLUMN crawl_full boolean NOT NULL DEFAULT false,
    ADD COLUMN next_full_crawl_at timestamptz;

ALTER TABLE runs
    ADD COLUMN deleted bigint NOT NULL DEFAULT 0,
    ADD COLUMN deletions_held bigint NOT NULL DEFAULT 0;

ALTER TABLE documents
    ADD COLUMN op text NOT NULL DEFAULT 'index',
    ADD COLUMN held boolean NOT NULL DEFAULT false;

CREATE INDEX documents_deleted_idx ON documents (updated_at) WHERE status = 'deleted';

CREATE TABLE crawl_pages (
    connector_id text COLLATE "C" NOT NULL REFERENCES connectors (id) ON DELETE CASCADE,
    crawl_id     text COLLATE "C" NOT NULL,
    ids          text[] COLLATE "C" NOT NULL
);

CREATE INDEX crawl_pages_crawl_idx ON crawl_pages (connector_id, crawl_id);
""",
    ),
    (
        4,
        # The record fields a connector's content hash covers (NULL: the whole record).
        "ALTER TABLE connectors ADD COLUMN hash_fields text[];",
    ),
    (
        5,
        # Instance heartbeats (GET /status): one row per process incarnation (its owner).
        """
CREATE TABLE instances (
    owner        text COLLATE "C" PRIMARY KEY,
    info         text NOT NULL,
    heartbeat_at timestamptz NOT NULL
);

CREATE INDEX instances_heartbeat_at_idx ON instances (heartbeat_at);
""",
    ),
    (
        6,
        # What a source keeps across runs and restarts (a rotated OAuth2 refresh token).
        "ALTER TABLE connectors ADD COLUMN secret_state jsonb NOT NULL DEFAULT '{}';",
    ),
    (
        7,
        # Admission control: a manual trigger that found no free run slot is stored (queued)
        # with its time; a partial index finds the queued ones in that order.
        """
ALTER TABLE connectors ADD COLUMN sync_queued_at timestamptz;

CREATE INDEX connectors_sync_queued_at_idx ON connectors (sync_queued_at, id)
    WHERE sync_queued_at IS NOT NULL;
""",
    ),
    (
        8,
        # Document counts per connector and status, so that a read of a connector never
        # counts its documents. Page commits, claims and finishes of one connector run
        # concurrently: a counter row per (connector, status) updated in place would be a
        # hot row that serialises them (and a lock that statements of one transaction take
        # in different orders). So every statement that writes documents appends its net
        # change per (connector, status) to an append-only table (a statement-level trigger
        # per event, over its transition tables); readers sum it. Writers never update or
        # lock a delta row, so they never wait on each other for counts. When a statement
        # finds more than COUNT_DELTAS_KEPT rows for a connector it touched, it folds them
        # into one per status (under a try-lock of that connector: one folder at a time,
        # nobody waits). The migration counts the documents already stored, after creating
        # the triggers (which lock the table against writers until it commits).
        # The counts are derived from the documents alone: whatever an older copy of the
        # table or function held is replaced.
        f"""
DROP TABLE IF EXISTS document_count_deltas;

CREATE TABLE document_count_deltas (
    connector_id text COLLATE "C" NOT NULL,
    status       text NOT NULL,
    delta        bigint NOT NULL
);

CREATE INDEX document_count_deltas_connector_idx ON document_count_deltas (connector_id);

{counters.COUNT_FUNCTION}

CREATE TRIGGER documents_counted_insert AFTER INSERT ON documents
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION syncd_count_documents();

CREATE TRIGGER documents_counted_update AFTER UPDATE ON documents
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION syncd_count_documents();

CREATE TRIGGER documents_counted_delete AFTER DELETE ON documents
    REFERENCING OLD TABLE AS old_rows
    FOR EACH STATEMENT EXECUTE FUNCTION syncd_count_documents();

INSERT INTO document_count_deltas (connector_id, status, delta)
SELECT connector_id, status, count(*) FROM documents GROUP BY connector_id, status;
""",
    ),
    (
        9,
        # The document shape a connector maps its records to (NULL: none).
        "ALTER TABLE connectors ADD COLUMN document jsonb;",
    ),
    (
        10,
        # Automatic retries of failed runs: the connector's budget and first wait, the failed
        # runs in a row and when the next retry is due; each run's attempt number.
        """
ALTER TABLE connectors ADD COLUMN retry_attempts integer NOT NULL DEFAULT 3;
ALTER TABLE connectors ADD COLUMN retry_backoff double precision NOT NULL DEFAULT 30;
ALTER TABLE connectors ADD COLUMN failures integer NOT NULL DEFAULT 0;
ALTER TABLE connectors ADD COLUMN retry_at timestamptz;
ALTER TABLE runs ADD COLUMN attempt integer NOT NULL DEFAULT 1;
""",
    ),
    (
        11,
        # Documents waiting to be retried (pending with a lease_until), found by the sweep.
        "CREATE INDEX documents_retry_wait_idx ON documents (lease_until) "
        "WHERE status = 'pending' AND lease_until IS NOT NULL;",
    ),
    (
        12,
        # How a run's crawl ended (the rule that ended it) and the warnings about that end, a
        # JSON array of texts.
        """
ALTER TABLE runs ADD COLUMN end_reason text;
ALTER TABLE runs ADD COLUMN warnings text NOT NULL DEFAULT '[]';
""",
    ),
    (
        13,
        # A document is deleted once enough complete full crawls in a row missed it (DESIGN.md
        # §12): each document counts the crawls that missed it (a partial index finds the
        # few that did, so that a crawl's end reads no other); the connector keeps its
        # setting (NULL: its pagination's default) and the documents waiting for
        # confirmation, each run those it left waiting.
        """
ALTER TABLE connectors
    ADD COLUMN prune_confirmations integer,
    ADD COLUMN awaiting_confirmation bigint NOT NULL DEFAULT 0;

ALTER TABLE runs ADD COLUMN awaiting_confirmation bigint NOT NULL DEFAULT 0;

ALTER TABLE documents ADD COLUMN missed integer NOT NULL DEFAULT 0;

CREATE INDEX documents_missed_idx ON documents (connector_id, external_id) WHERE missed > 0;
""",
    ),
    (
        14,
        # The records a run's source read and left out (a backfill's past the end of its
        # window).
        "ALTER TABLE runs ADD COLUMN documents_filtered bigint NOT NULL DEFAULT 0;",
    ),
)
