"""The PostgreSQL store's document counters: SQL of the per-connector, per-status counts.

Every statement that writes documents appends its net change per (connector, status) to
``document_count_deltas`` through a statement-level trigger (the function below); readers
sum the deltas, and a write folds a connector's rows once they pile up. Migration 8 (in
:mod:`syncd.store.postgres.migrations`) creates the table and triggers and embeds
:data:`COUNT_FUNCTION`: a released migration never changes, so neither does that text (a
later change to the function goes in a new migration).
"""

from __future__ import annotations

from typing import Final

COUNT_DELTAS_KEPT: Final = 32
"""Delta rows of one connector above which a write folds them (see migration 8)."""

COUNT_LOCK_CLASS: Final = 0x73796E63
"""First key of the advisory try-lock of one connector's fold (the second is its id's hash)."""

# The trigger function of every write to documents (see migration 8): it appends the
# statement's net change, then folds the rows of each connector it touched that has more
# than COUNT_DELTAS_KEPT (one folder at a time per connector, under a try-lock: nobody
# waits).
COUNT_FUNCTION: Final = f"""\
CREATE OR REPLACE FUNCTION syncd_count_documents() RETURNS trigger LANGUAGE plpgsql AS $fn$
DECLARE
    touched text[];
    c text;
BEGIN
    IF TG_OP = 'INSERT' THEN
        WITH d AS (
            INSERT INTO document_count_deltas (connector_id, status, delta)
            SELECT connector_id, status, count(*) FROM new_rows GROUP BY connector_id, status
            RETURNING connector_id
        )
        SELECT array_agg(DISTINCT connector_id) INTO touched FROM d;
    ELSIF TG_OP = 'DELETE' THEN
        WITH d AS (
            INSERT INTO document_count_deltas (connector_id, status, delta)
            SELECT connector_id, status, -count(*) FROM old_rows GROUP BY connector_id, status
            RETURNING connector_id
        )
        SELECT array_agg(DISTINCT connector_id) INTO touched FROM d;
    ELSE
        -- Only the statuses that changed count (a lease extension writes nothing here).
        WITH d AS (
            INSERT INTO document_count_deltas (connector_id, status, delta)
            SELECT connector_id, status, sum(delta) FROM (
                SELECT connector_id, status, 1::bigint AS delta FROM new_rows
                UNION ALL
                SELECT connector_id, status, -1::bigint FROM old_rows
            ) AS t
            GROUP BY connector_id, status
            HAVING sum(delta) <> 0
            RETURNING connector_id
        )
        SELECT array_agg(DISTINCT connector_id) INTO touched FROM d;
    END IF;
    FOREACH c IN ARRAY coalesce(touched, '{{}}') LOOP
        IF (SELECT count(*) FROM (
                SELECT 1 FROM document_count_deltas WHERE connector_id = c
                LIMIT {COUNT_DELTAS_KEPT + 1}
            ) AS kept) > {COUNT_DELTAS_KEPT}
           AND pg_try_advisory_xact_lock({COUNT_LOCK_CLASS}, hashtext(c)) THEN
            -- Exactly the rows deleted are summed: a delta committed meanwhile stays.
            WITH gone AS (
                DELETE FROM document_count_deltas WHERE connector_id = c
                RETURNING status, delta
            )
            INSERT INTO document_count_deltas (connector_id, status, delta)
            SELECT c, status, sum(delta) FROM gone GROUP BY status HAVING sum(delta) <> 0;
        END IF;
    END LOOP;
    RETURN NULL;
END
$fn$;"""

# A connector's counts as one jsonb object (``{}`` without documents), summed from the
# deltas: a column of a query on ``connectors``, so one statement answers a connector with
# its counts.
COUNTS_OBJECT: Final = """
    coalesce((
        SELECT jsonb_object_agg(k.status, k.n) FROM (
            SELECT status, sum(delta)::bigint AS n FROM document_count_deltas
            WHERE connector_id = connectors.id GROUP BY status
        ) AS k
    ), '{}') AS document_counts"""

# One connector's counts, never the documents themselves.
DOCUMENT_COUNTS: Final = """
SELECT status, sum(delta)::bigint AS n FROM document_count_deltas WHERE connector_id = $1
GROUP BY status"""

# Metrics (syncd/observability/metrics.py): the whole store's counts.
DOCUMENT_TOTALS: Final = """
SELECT status, sum(delta)::bigint AS n FROM document_count_deltas GROUP BY status"""

# After the connector's documents are deleted: every delta their writers committed is
# visible by then.
DELETE_CONNECTOR_COUNTS: Final = "DELETE FROM document_count_deltas WHERE connector_id = $1"
