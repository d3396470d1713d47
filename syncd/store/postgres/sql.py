"""Every query of the PostgreSQL store, each under a name.

The schema's migrations live in :mod:`syncd.store.postgres.migrations`, the document
counters' SQL in :mod:`syncd.store.postgres.counters_sql`; the counters' names the store uses
are re-bound here, so that every query is read as ``sql.NAME``.

Column lists come from :mod:`syncd.store.codec`, whose converters build the parameters and
read the rows. Identifiers that are compared and sorted (connector, run and external ids)
use the ``"C"`` collation, so that ordering and keyset pagination are byte-wise, as in the
SQLite store, whatever the database's locale.
"""

from __future__ import annotations

from typing import Final

from syncd.store.codec import CLAIM_COLUMNS, CONNECTOR_COLUMNS, DOCUMENT_COLUMNS, RUN_COLUMNS
from syncd.store.postgres import counters_sql as counters

# The document counters' SQL lives in counters_sql; the store reads these names
# here (errors name a statement by its name in this module).
COUNT_DELTAS_KEPT: Final = counters.COUNT_DELTAS_KEPT
DOCUMENT_COUNTS: Final = counters.DOCUMENT_COUNTS
DOCUMENT_TOTALS: Final = counters.DOCUMENT_TOTALS
DELETE_CONNECTOR_COUNTS: Final = counters.DELETE_CONNECTOR_COUNTS

# --- connectors -------------------------------------------------------------------------

_CONNECTOR_COLUMNS: Final = ", ".join(CONNECTOR_COLUMNS)
MUTABLE_CONNECTOR_COLUMNS: Final = tuple(
    c for c in CONNECTOR_COLUMNS if c not in ("id", "created_at")
)
"""What a mutation writes: every column but the key and the creation time."""

# Parameters: the values of codec.connector_to_row, in CONNECTOR_COLUMNS order.
INSERT_CONNECTOR: Final = (
    f"INSERT INTO connectors ({_CONNECTOR_COLUMNS}) "
    f"VALUES ({', '.join(f'${i}' for i in range(1, len(CONNECTOR_COLUMNS) + 1))})"
)

# Parameters: the id, then the values of MUTABLE_CONNECTOR_COLUMNS in order.
UPDATE_CONNECTOR: Final = (
    "UPDATE connectors SET "
    + ", ".join(f"{c} = ${i}" for i, c in enumerate(MUTABLE_CONNECTOR_COLUMNS, start=2))
    + " WHERE id = $1"
)
GET_CONNECTOR: Final = f"SELECT {_CONNECTOR_COLUMNS} FROM connectors WHERE id = $1"

LOCK_CONNECTOR: Final = f"SELECT {_CONNECTOR_COLUMNS} FROM connectors WHERE id = $1 FOR UPDATE"

LIST_CONNECTORS: Final = f"""
SELECT {_CONNECTOR_COLUMNS} FROM connectors
WHERE ($1::text IS NULL OR status = $1) AND ($2::text IS NULL OR id > $2)
ORDER BY id
LIMIT $3"""

# With the connector's document counts (counters_sql).
GET_CONNECTOR_COUNTED: Final = (
    f"SELECT {_CONNECTOR_COLUMNS}, {counters.COUNTS_OBJECT} FROM connectors WHERE id = $1"
)

LIST_CONNECTORS_COUNTED: Final = f"""
SELECT {_CONNECTOR_COLUMNS}, {counters.COUNTS_OBJECT} FROM connectors
WHERE ($1::text IS NULL OR status = $1) AND ($2::text IS NULL OR id > $2)
ORDER BY id
LIMIT $3"""

# What a tick may act on: due schedules and queued triggers (each side served by its index).
_ADMISSIBLE: Final = """
(next_run_at <= $1 AND status IN ('active', 'error')) OR sync_queued_at IS NOT NULL"""

COUNT_ADMISSIBLE: Final = f"""
SELECT count(*) FROM (SELECT 1 FROM connectors WHERE {_ADMISSIBLE} LIMIT $2) AS due"""

# Oldest first: the age is the earlier of a due next_run_at and sync_queued_at. SKIP LOCKED:
# several instances share the due work, none waits for another's claim; the LIMIT counts
# only the rows this transaction locked.
LOCK_ADMISSIBLE: Final = f"""
SELECT {_CONNECTOR_COLUMNS} FROM connectors
WHERE {_ADMISSIBLE}
ORDER BY least(CASE WHEN next_run_at <= $1 AND status IN ('active', 'error')
                    THEN next_run_at END, sync_queued_at), id
LIMIT $2
FOR UPDATE SKIP LOCKED"""

CLAIM_COLUMN_TYPES: Final = {
    "sync_status": "text",
    "run_id": "text",
    "sync_started_at": "timestamptz",
    "sync_owner": "text",
    "sync_heartbeat_at": "timestamptz",
    "progress_pages": "bigint",
    "progress_documents": "bigint",
    "waiting_reason": "text",
    "waiting_until": "timestamptz",
    "next_run_at": "timestamptz",
    "sync_queued_at": "timestamptz",
    "updated_at": "timestamptz",
    "failures": "integer",
    "retry_at": "timestamptz",
}

# One statement for every claim of a tick; parameters: one array per column (id first, then
# CLAIM_COLUMNS in order).
CLAIM_CONNECTORS: Final = (
    "UPDATE connectors AS c SET "
    + ", ".join(f"{col} = u.{col}" for col in CLAIM_COLUMNS)
    + " FROM unnest($1::text[], "
    + ", ".join(f"${i}::{CLAIM_COLUMN_TYPES[col]}[]" for i, col in enumerate(CLAIM_COLUMNS, 2))
    + ") AS u (id, "
    + ", ".join(CLAIM_COLUMNS)
    + ") WHERE c.id = u.id"
)

INSERT_RUNS: Final = """
INSERT INTO runs (id, connector_id, trigger, outcome, started_at, owner, attempt)
SELECT id, connector_id, trigger, 'running', started_at, owner, attempt
FROM unnest($1::text[], $2::text[], $3::text[], $4::timestamptz[], $5::text[], $6::integer[])
    AS u (id, connector_id, trigger, started_at, owner, attempt)"""

END_RUNS: Final = """
UPDATE runs AS r SET outcome = u.outcome, finished_at = u.finished_at, error = u.error
FROM unnest($1::text[], $2::text[], $3::timestamptz[], $4::text[])
    AS u (id, outcome, finished_at, error)
WHERE r.id = u.id AND r.outcome = 'running'"""

# In id order, like every writer of several documents: a finish, claim or lease sweep takes
# no connector lock, and a deletion meeting the rows in another order (a sequential scan)
# could deadlock with it. The locked rows are deleted through a join on the key, not by
# ctid: a row a finish rewrote while the deletion waited for it is locked at its new
# version, which the statement's snapshot cannot see, so a delete by ctid would leave it
# behind; the join meets the old version and deletes the latest one.
DELETE_CONNECTOR_DOCUMENTS: Final = """
WITH c AS (
    SELECT external_id FROM documents
    WHERE connector_id = $1
    ORDER BY external_id
    FOR UPDATE
)
DELETE FROM documents AS d
USING c
WHERE d.connector_id = $1 AND d.external_id = c.external_id"""
DELETE_CONNECTOR: Final = "DELETE FROM connectors WHERE id = $1"  # runs go by cascade

# --- run writes, fenced by run id ---------------------------------------------------------

# The fence and the checkpoint in one statement: only the connector's current run may write
# (no row returned means "not the current run"), and the row lock it takes serialises the
# page commit with an abort that clears run_id.
CHECKPOINT_PAGE: Final = """
UPDATE connectors SET
    resume_cursor = $3, source_state = $4, progress_pages = progress_pages + 1,
    progress_documents = progress_documents + $5, sync_heartbeat_at = $6,
    crawl_id = coalesce($7::text, crawl_id), crawl_full = coalesce($8::boolean, crawl_full)
WHERE id = $1 AND run_id = $2
RETURNING id"""

# One statement for the whole page; payloads are JSON text, stored as they are. The WHERE of
# DO UPDATE leaves unchanged documents untouched (no new row version), and RETURNING yields
# exactly the ids to enqueue. Parameters: connector id, external ids, content hashes,
# payloads, now, REQUEUE_ERROR, the status to write, REQUEUE_STATUS (syncd.rules.documents).
# A document written is an index operation, no longer held nor missed by any crawl.
UPSERT_DOCUMENTS: Final = """
INSERT INTO documents AS d
    (connector_id, external_id, status, content_hash, payload, error, attempts,
     created_at, updated_at, indexed_at, op)
SELECT $1, t.external_id, $7::text, t.content_hash, t.payload, NULL, 0,
       $5::timestamptz, $5::timestamptz,
       CASE WHEN $7::text = 'indexed' THEN $5::timestamptz END, 'index'
FROM unnest($2::text[], $3::text[], $4::text[]) AS t(external_id, content_hash, payload)
ON CONFLICT (connector_id, external_id) DO UPDATE SET
    status = excluded.status, content_hash = excluded.content_hash, payload = excluded.payload,
    error = NULL, attempts = 0, lease_token = NULL, lease_until = NULL,
    updated_at = excluded.updated_at, indexed_at = COALESCE(excluded.indexed_at, d.indexed_at),
    op = 'index', held = false, missed = 0
-- The enqueue rule, syncd.rules.must_write (a new document never reaches this WHERE): a
-- deleted document, or one being deleted, that a crawl sees again is indexed again.
WHERE d.content_hash <> excluded.content_hash
   OR (d.status = $8 AND d.error = $6)
   OR d.status = 'deleted' OR d.op = 'delete'
RETURNING d.external_id"""

# A page with tombstones writes documents in two statements (the upsert, then the deletions):
# each locks its rows in id order, but together they would not, and a worker finishing
# documents of both sets could deadlock with the commit. So such a page first locks every
# stored document it names, in id order. Parameters: connector id, external ids.
LOCK_PAGE_DOCUMENTS: Final = """
SELECT 1 FROM documents
WHERE connector_id = $1 AND external_id = ANY($2::text[])
ORDER BY external_id
FOR UPDATE"""

# What a full crawl saw: the page's external ids, one row per page.
SEEN_PAGE: Final = "INSERT INTO crawl_pages (connector_id, crawl_id, ids) VALUES ($1, $2, $3)"

# --- deletions (DESIGN.md §11) ------------------------------------------------------------

# Live documents not already on their way out: what a prune may delete or hold.
_PRUNABLE: Final = (
    "d.status <> 'deleted' AND NOT (d.op = 'delete' AND d.status IN ('pending', 'running'))"
)


def _seen(crawl: str | None) -> str:
    """The external ids the pages of crawl ``crawl`` (a parameter; every crawl kept if
    ``None``) of connector ``$1`` saw: a set to anti-join with (``NOT EXISTS``)."""
    which = "" if crawl is None else f" AND p.crawl_id = {crawl}"
    return f"""
    SELECT 1 FROM crawl_pages AS p, unnest(p.ids) AS s(external_id)
    WHERE p.connector_id = $1{which} AND s.external_id = d.external_id"""


def _mark_delete(selection: str) -> str:
    """A deletion of the connector's prunable documents matching ``selection`` (on ``d``):
    at once ($2 = 'deleted', the payload dropped) or as a pending delete operation
    ($2 = 'pending') that travels the queue like an index. Parameters: connector id, status,
    now, then the selection's own ($4)."""
    return f"""
WITH c AS (
    SELECT d.external_id FROM documents AS d
    WHERE d.connector_id = $1 AND {_PRUNABLE} AND {selection}
    ORDER BY d.external_id
    FOR UPDATE OF d
)
UPDATE documents AS d SET
    op = 'delete', status = $2, error = NULL, attempts = 0, held = false, missed = 0,
    lease_token = NULL, lease_until = NULL, updated_at = $3,
    payload = CASE WHEN $2::text = 'deleted' THEN 'null' ELSE d.payload END
FROM c
WHERE d.connector_id = $1 AND d.external_id = c.external_id
RETURNING d.external_id"""


DELETE_IDS: Final = _mark_delete("d.external_id = ANY($4::text[])")
# What a complete crawl confirms gone (DESIGN.md §12): the prunable documents that as many
# complete crawls in a row as the connector asks ($4, at least 1) have missed, this one
# included (TALLY_MISSED ran first, and locked them).
DELETE_CONFIRMED: Final = _mark_delete("d.missed > 0 AND d.missed >= $4")
# Held, and not seen again by a crawl begun since (its pages are the only ones kept).
DELETE_HELD: Final = _mark_delete(f"d.held AND NOT EXISTS ({_seen(None)})")


def _update_in_id_order(selection: str, assignments: str) -> str:
    """An update of the connector's ($1) documents matching ``selection`` (on ``d``), locked
    first in id order, like every statement that writes several documents (see
    --- documents ---)."""
    return f"""
WITH c AS (
    SELECT d.external_id FROM documents AS d
    WHERE d.connector_id = $1 AND {selection}
    ORDER BY d.external_id
    FOR UPDATE OF d
)
UPDATE documents AS d SET {assignments}
FROM c
WHERE d.connector_id = $1 AND d.external_id = c.external_id"""


HOLD_CONFIRMED: Final = _update_in_id_order(
    f"{_PRUNABLE} AND d.missed > 0 AND d.missed >= $2", "held = true"
)
CLEAR_HELD: Final = _update_in_id_order("d.held", "held = false")

# A prune that writes documents in two statements (deleting some held documents, then
# unmarking the others) locks, first and in id order, every document either may write: each
# statement alone locks in id order, but the two together would not, and a worker finishing
# documents of both sets (it holds no connector lock) could deadlock with the prune. The set
# is stable while the prune holds the connector row: `held` is only ever written under that
# lock. Parameter: connector id.
LOCK_HELD: Final = """
SELECT 1 FROM documents
WHERE connector_id = $1 AND held
ORDER BY external_id
FOR UPDATE"""

# The distinct ids crawl $2 saw: a set to anti-join with.
_SEEN_BY_CRAWL: Final = """
WITH seen AS (
    SELECT DISTINCT s.external_id
    FROM crawl_pages AS p, unnest(p.ids) AS s(external_id)
    WHERE p.connector_id = $1 AND p.crawl_id = $2
)"""

# A complete crawl's end writes every document it writes in this one statement, so in id
# order (DELETE_CONFIRMED and HOLD_CONFIRMED then write some of the rows it locked: see
# LOCK_HELD): none stays held (the crawl recomputes that), and each counts the complete
# crawls in a row that missed it: one more for the prunable ones crawl $2 did not see when
# $3 (the plan prunes), else 0 again. With nothing held nor counted, RESET_MISSED instead.
TALLY_MISSED: Final = f"""{_SEEN_BY_CRAWL}, c AS (
    SELECT d.external_id, ($3::boolean AND seen.external_id IS NULL AND {_PRUNABLE}) AS again
    FROM documents AS d LEFT JOIN seen ON seen.external_id = d.external_id
    WHERE d.connector_id = $1
      AND (d.held OR d.missed > 0
           OR ($3::boolean AND seen.external_id IS NULL AND {_PRUNABLE}))
    ORDER BY d.external_id
    FOR UPDATE OF d
)
UPDATE documents AS d SET
    held = false, missed = CASE WHEN c.again THEN d.missed + 1 ELSE 0 END
FROM c
WHERE d.connector_id = $1 AND d.external_id = c.external_id"""

RESET_MISSED: Final = _update_in_id_order("d.missed > 0", "missed = 0")

FORGET_CRAWLS: Final = "DELETE FROM crawl_pages WHERE connector_id = $1"

# The guard's figures: live documents, those of them the crawl did not see (an anti-join
# with the crawl's distinct ids), and of those the ones it confirms gone: missed at least $3
# times before (the connector's prune_confirmations less one).
PRUNE_COUNTS: Final = f"""{_SEEN_BY_CRAWL}
SELECT count(*) AS live,
       count(*) FILTER (WHERE seen.external_id IS NULL AND {_PRUNABLE}) AS unseen,
       count(*) FILTER (
           WHERE seen.external_id IS NULL AND {_PRUNABLE} AND d.missed >= $3
       ) AS due
FROM documents AS d LEFT JOIN seen ON seen.external_id = d.external_id
WHERE d.connector_id = $1 AND d.status <> 'deleted'"""

RUN_PRUNED: Final = """
UPDATE runs SET deleted = deleted + $2, deletions_held = deletions_held + $3,
    awaiting_confirmation = $4
WHERE id = $1"""

# Without the connector lock, so in key order like every writer of several documents: a
# page that sees tombstones again turns them live in that order, and a purge meeting them in
# another (its partial index yields them by deletion time) would deadlock with it. A row
# turned live while the purge waited for it is re-checked by FOR UPDATE and left alone. The
# locked rows are deleted by their ctid (a TID scan): a join on the key was planned as a
# scan of every document.
PURGE_DELETED: Final = """
WITH c AS (
    SELECT ctid FROM documents
    WHERE status = 'deleted' AND updated_at < $1
    ORDER BY connector_id, external_id
    FOR UPDATE
)
DELETE FROM documents WHERE ctid = ANY(ARRAY(SELECT ctid FROM c))"""

# The sample of rejections is read and rewritten only when a page rejected records (the
# connector row lock of the fence serialises the run's writes); a null sample or note leaves
# the column as it is.
RUN_REJECTIONS: Final = "SELECT pages, rejections FROM runs WHERE id = $1"

RUN_PAGE: Final = """
UPDATE runs SET
    pages = pages + 1, documents_seen = documents_seen + $2,
    documents_enqueued = documents_enqueued + $3,
    documents_rejected = documents_rejected + $4,
    rejections = coalesce($5::text, rejections), note = coalesce($6::text, note),
    deleted = deleted + $7, documents_filtered = documents_filtered + $8
WHERE id = $1"""

# The fence of a run's writes that do not checkpoint (its requeue of aborted documents): the
# row lock holds off an abort until the write commits.
LOCK_CURRENT_RUN: Final = "SELECT 1 FROM connectors WHERE id = $1 AND run_id = $2 FOR UPDATE"

REPORT: Final = """
UPDATE connectors SET sync_heartbeat_at = $3, waiting_reason = $4, waiting_until = $5
WHERE id = $1 AND run_id = $2"""

# --- runs ----------------------------------------------------------------------------------

_RUN_COLUMNS: Final = ", ".join(RUN_COLUMNS)

INSERT_RUN: Final = """
INSERT INTO runs (id, connector_id, trigger, outcome, started_at, owner, attempt)
VALUES ($1, $2, $3, 'running', $4, $5, $6)"""

END_RUN: Final = """
UPDATE runs SET outcome = $2, finished_at = $3, error = $4, end_reason = $5, warnings = $6
WHERE id = $1 AND outcome = 'running'"""

GET_RUN: Final = f"SELECT {_RUN_COLUMNS} FROM runs WHERE id = $1"

LIST_RUNS: Final = f"""
SELECT {_RUN_COLUMNS} FROM runs
WHERE connector_id = $1 AND ($2::text IS NULL OR id < $2)
ORDER BY id DESC
LIMIT $3"""

# --- documents -----------------------------------------------------------------------------

_DOCUMENT_COLUMNS: Final = ", ".join(DOCUMENT_COLUMNS)

GET_DOCUMENT: Final = f"""
SELECT {_DOCUMENT_COLUMNS}, payload FROM documents
WHERE connector_id = $1 AND external_id = $2"""

# Listing has one statement per shape rather than "($n IS NULL OR …)" so that a cached
# generic plan keeps the keyset condition as an index range bound.
LIST_DOCUMENTS: Final = f"""
SELECT {_DOCUMENT_COLUMNS} FROM documents
WHERE connector_id = $1
ORDER BY external_id LIMIT $2"""

LIST_DOCUMENTS_AFTER: Final = f"""
SELECT {_DOCUMENT_COLUMNS} FROM documents
WHERE connector_id = $1 AND external_id > $3
ORDER BY external_id LIMIT $2"""

LIST_DOCUMENTS_BY_STATUS: Final = f"""
SELECT {_DOCUMENT_COLUMNS} FROM documents
WHERE connector_id = $1 AND status = $3
ORDER BY external_id LIMIT $2"""

LIST_DOCUMENTS_BY_STATUS_AFTER: Final = f"""
SELECT {_DOCUMENT_COLUMNS} FROM documents
WHERE connector_id = $1 AND status = $3 AND external_id > $4
ORDER BY external_id LIMIT $2"""

PENDING_DOCUMENTS: Final = """
SELECT connector_id, external_id FROM documents
WHERE status = 'pending'
ORDER BY connector_id, external_id LIMIT $1"""

PENDING_DOCUMENTS_AFTER: Final = """
SELECT connector_id, external_id FROM documents
WHERE status = 'pending' AND (connector_id, external_id) > ($2, $3)
ORDER BY connector_id, external_id LIMIT $1"""

# Every statement that writes several documents locks them in (connector_id, external_id)
# order -- the upsert by sorting its input, the others through an ordered FOR UPDATE -- so
# that two of them touching the same rows cannot deadlock.

# The claim is one conditional UPDATE: a claimer that waited for a row lock re-checks
# status = 'pending' on the new row version, so each document is claimed once.
# Its plan must not depend on statistics: during a first sync the table grows faster than
# autovacuum analyzes it, and "external_id = ANY($2)" was then planned as a scan of every
# pending document of the connector for each batch (quadratic in the backlog). So the ids
# drive one locking index probe each, in id order (a subquery with FOR UPDATE is never
# flattened into a join). The locked rows are updated through a join on the key, not by
# ctid: a row rewritten while the claim waited for it is locked at its new version, which
# the statement's snapshot cannot see, so an update by ctid skipped it (the document then
# stayed pending with its queue entry gone); the join meets the old version and updates the
# latest one.
_DOCUMENT_CLAIM: Final = """
WITH c AS (
    SELECT l.external_id
    FROM (SELECT DISTINCT unnest($2::text[]) AS external_id ORDER BY 1) AS i
    CROSS JOIN LATERAL (
        SELECT p.external_id FROM documents AS p
        WHERE p.connector_id = $1 AND p.external_id = i.external_id AND p.status = 'pending'
          -- a pending document with a lease_until waits to be retried until then
          AND (p.lease_until IS NULL OR p.lease_until <= $5)
        FOR UPDATE
    ) AS l
)
UPDATE documents AS d SET
    status = 'running', lease_token = $3, lease_until = $4, attempts = d.attempts + 1,
    updated_at = $5
FROM c
WHERE d.connector_id = $1 AND d.external_id = c.external_id
RETURNING """
_CLAIMED_DOCUMENT_COLUMNS: Final = ", ".join(f"d.{c}" for c in DOCUMENT_COLUMNS)
# Last, the connector's status and updated_at (one initplan each, read once): the stamp a
# worker compares with the connector it holds (Store.claim_for_delivery).
_CLAIM_STAMP: Final = (
    "(SELECT k.status FROM connectors AS k WHERE k.id = $1), "
    "(SELECT k.updated_at FROM connectors AS k WHERE k.id = $1)"
)
CLAIM_DOCUMENTS: Final = f"{_DOCUMENT_CLAIM}{_CLAIMED_DOCUMENT_COLUMNS}, d.payload, {_CLAIM_STAMP}"
CLAIM_DOCUMENTS_NO_PAYLOAD: Final = f"{_DOCUMENT_CLAIM}{_CLAIMED_DOCUMENT_COLUMNS}, {_CLAIM_STAMP}"


# Driven by the ids like the claim, for the same reason: "external_id = ANY($4)" next to
# "status = 'running'" was planned as a scan of the connector's running entries of the
# status index -- dead ones included, one per document claimed since the last vacuum -- so
# each finish read every document the sync had claimed so far (quadratic in the sync).
# Each id is one locking probe of the primary key, in id order; the locked rows are updated
# through a join on the key, as the claim's are (the worker's own lease renewal rewrites
# its documents: by ctid, a finish that waited for it skipped them, and they stayed running
# until their lease expired). The caller passes each id once.
def _held(values: str, names: str) -> str:
    """The ids of rows ``values`` (``unnest`` of arrays with columns ``external_id`` and
    ``names``) still running under lease ``$2`` of connector ``$1``, locked one key probe each
    in id order, as ``c`` with those columns."""
    picked = ", ".join(f"r.{name}" for name in names.split(", "))
    return f"""
WITH c AS (
    SELECT l.external_id, {picked}
    FROM (
        SELECT * FROM {values} AS t(external_id, {names})
        ORDER BY t.external_id COLLATE "C"
    ) AS r
    CROSS JOIN LATERAL (
        SELECT p.external_id FROM documents AS p
        WHERE p.connector_id = $1 AND p.external_id = r.external_id
          AND p.status = 'running' AND p.lease_token = $2
        FOR UPDATE
    ) AS l
)"""


FINISH_DOCUMENTS: Final = (
    _held("unnest($4::text[], $5::text[], $6::text[])", "status, error")
    + """
UPDATE documents AS d SET
    status = c.status, error = c.error, lease_token = NULL, lease_until = NULL,
    updated_at = $3,
    indexed_at = CASE WHEN c.status = 'indexed' THEN $3 ELSE d.indexed_at END,
    payload = CASE WHEN c.status = 'deleted' THEN 'null' ELSE d.payload END
FROM c
WHERE d.connector_id = $1 AND d.external_id = c.external_id"""
)

EXTEND_LEASES: Final = """
WITH c AS (
    SELECT external_id FROM documents
    WHERE connector_id = $1 AND lease_token = $2 AND status = 'running'
    ORDER BY external_id
    FOR UPDATE
)
UPDATE documents AS d SET lease_until = $3
FROM c
WHERE d.connector_id = $1 AND d.external_id = c.external_id"""

# Documents whose transient failure is retried: pending again, with the error, waiting until
# their lease_until; ids in order, one probe of the key each, as the finish.
RETRY_DOCUMENTS: Final = (
    _held("unnest($4::text[], $5::text[], $6::timestamptz[])", "error, not_before")
    + """
UPDATE documents AS d SET
    status = 'pending', error = c.error, lease_token = NULL, lease_until = c.not_before,
    updated_at = $3
FROM c
WHERE d.connector_id = $1 AND d.external_id = c.external_id"""
)

RELEASE_DUE_RETRIES: Final = """
WITH c AS (
    SELECT connector_id, external_id FROM documents
    WHERE status = 'pending' AND lease_until <= $1
    ORDER BY connector_id, external_id
    FOR UPDATE
)
UPDATE documents AS d SET lease_until = NULL, updated_at = $1
FROM c
WHERE d.connector_id = c.connector_id AND d.external_id = c.external_id
RETURNING d.connector_id, d.external_id"""

RELEASE_EXPIRED_LEASES: Final = """
WITH c AS (
    SELECT connector_id, external_id FROM documents
    WHERE status = 'running' AND lease_until <= $1
    ORDER BY connector_id, external_id
    FOR UPDATE
)
UPDATE documents AS d SET
    status = 'pending', lease_token = NULL, lease_until = NULL, updated_at = $1
FROM c
WHERE d.connector_id = c.connector_id AND d.external_id = c.external_id
RETURNING d.connector_id, d.external_id"""

FAIL_DOCUMENTS: Final = """
WITH c AS (
    SELECT external_id FROM documents
    WHERE connector_id = $1 AND status = ANY($2::text[])
    ORDER BY external_id
    FOR UPDATE
)
UPDATE documents AS d SET
    status = 'failed', error = $3, lease_token = NULL, lease_until = NULL, updated_at = $4
FROM c
WHERE d.connector_id = $1 AND d.external_id = c.external_id"""

REQUEUE_DOCUMENTS: Final = """
WITH c AS (
    SELECT external_id FROM documents
    WHERE connector_id = $1 AND status = 'failed' AND ($2::text IS NULL OR error = $2)
    ORDER BY external_id
    FOR UPDATE
)
UPDATE documents AS d SET status = 'pending', error = NULL, attempts = 0, updated_at = $3
FROM c
WHERE d.connector_id = $1 AND d.external_id = c.external_id
RETURNING d.external_id"""

PING: Final = "SELECT 1"

# Metrics (syncd/observability/metrics.py): whole-store totals, one aggregate query each (the
# document totals are in counters_sql).
CONNECTOR_TOTALS: Final = """
SELECT status, sync_status, count(*) AS n FROM connectors GROUP BY status, sync_status"""

# Instance heartbeats (GET /status).
HEARTBEAT_INSTANCE: Final = """
INSERT INTO instances (owner, info, heartbeat_at) VALUES ($1, $2, $3)
ON CONFLICT (owner) DO UPDATE SET info = excluded.info, heartbeat_at = excluded.heartbeat_at"""

LIST_INSTANCES: Final = """
SELECT owner, info, heartbeat_at FROM instances WHERE heartbeat_at > $1 ORDER BY owner"""

REMOVE_INSTANCE: Final = "DELETE FROM instances WHERE owner = $1"


# --- secret state -------------------------------------------------------------------------

GET_SECRET_STATE: Final = "SELECT secret_state FROM connectors WHERE id = $1 FOR UPDATE"
SET_SECRET_STATE: Final = "UPDATE connectors SET secret_state = $2 WHERE id = $1"
