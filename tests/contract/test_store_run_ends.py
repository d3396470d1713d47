"""How a run's crawl ended (``end_reason``) and the warnings about that end, on every store
backend: recorded by the run's end, read back by ``get_run`` and ``list_runs``, written once."""

from __future__ import annotations

from syncd import rules
from syncd.models import Connector, CrawlEnd, RunEnd, RunOutcome, Transition
from syncd.store.base import StateRule, Store
from tests.contract.factories import at, make_connector, start_run

# Quotes, backticks and text beyond ASCII, as paths in a connector's config may hold.
END = CrawlEnd(
    "no next cursor at 'curs\u00f6r.n\u00e4chste'",
    (
        "next cursor path 'curs\u00f6r.n\u00e4chste' was absent from every page: check "
        "`pagination.next_cursor`",
        'a second warning with "quotes" and \\ a backslash',
    ),
)


async def add_connector(store: Store) -> Connector:
    return await store.create_connector(make_connector())


async def test_a_new_run_has_no_end_and_no_warnings(store: Store) -> None:
    c = await add_connector(store)
    run_id = await start_run(store, c.id)
    run = await store.get_run(run_id)
    assert run is not None and (run.end_reason, run.warnings) == (None, ())


async def test_a_succeeded_run_keeps_how_its_crawl_ended(store: Store) -> None:
    c = await add_connector(store)
    run_id = await start_run(store, c.id)
    # The run's own path: the success transition, applied with its prune.
    await store.mutate_with_prune(
        c.id, lambda current, counts: rules.succeed(current, run_id=run_id, now=at(5), end=END)
    )
    run = await store.get_run(run_id)
    assert run is not None
    assert (run.outcome, run.end_reason, run.warnings) == (
        RunOutcome.SUCCEEDED,
        END.reason,
        END.warnings,
    )
    [listed] = await store.list_runs(c.id)
    assert (listed.end_reason, listed.warnings) == (END.reason, END.warnings)


async def test_an_end_without_warnings_reads_back_empty(store: Store) -> None:
    c = await add_connector(store)
    run_id = await start_run(store, c.id)
    end = CrawlEnd("'has_more' is false")
    await store.mutate_connector(
        c.id, lambda current: rules.succeed(current, run_id=run_id, now=at(5), end=end)
    )
    run = await store.get_run(run_id)
    assert run is not None and (run.end_reason, run.warnings) == ("'has_more' is false", ())


async def test_a_failed_run_records_no_end(store: Store) -> None:
    c = await add_connector(store)
    run_id = await start_run(store, c.id)
    await store.mutate_connector(
        c.id, lambda current: rules.fail(current, run_id=run_id, error="HTTP 500", now=at(5))
    )
    run = await store.get_run(run_id)
    assert run is not None
    assert (run.outcome, run.error, run.end_reason, run.warnings) == (
        RunOutcome.FAILED,
        "HTTP 500",
        None,
        (),
    )


async def test_the_end_is_written_once(store: Store) -> None:
    c = await add_connector(store)
    run_id = await start_run(store, c.id)

    def end(reason: str, warnings: tuple[str, ...]) -> StateRule:
        def change(current: Connector) -> Transition:
            ended = RunEnd(run_id, RunOutcome.SUCCEEDED, at(5), None, reason, warnings)
            return Transition(current, ends=(ended,))

        return change

    await store.mutate_connector(c.id, end(END.reason, END.warnings))
    # A second end for a finished run changes nothing, its end and warnings included.
    await store.mutate_connector(c.id, end("empty page", ()))
    run = await store.get_run(run_id)
    assert run is not None and (run.end_reason, run.warnings) == (END.reason, END.warnings)
