"""syncd's queued path against its floor, in rounds: the figure of issue 22's first item.

    python bench/queued_path.py                                 # SQLite + memory://, 3 rounds
    python bench/queued_path.py --backend postgres --runs 5     # PostgreSQL + Redis
    python bench/queued_path.py --backend both --records 50000

Each round runs the queued floor (``queued_floor.py``, claim in the store: page upsert, claim
and finish, nothing else) and a full sync through syncd's queue and workers with an indexer
that does nothing (``sync_throughput.py --indexer queued``), on the same pages, one after the
other, alternating which goes first from one round to the next. Each phase gets a fresh store
(SQLite: a new file; PostgreSQL: a throwaway database, or a schema of its own for the floor,
and a throwaway Redis prefix), with a ``CHECKPOINT`` between phases on PostgreSQL.

Printed per phase: everything-indexed documents/s, CPU µs per document (this process: the
loop and, on SQLite, the writer's thread; PostgreSQL's and Redis's processes, which on a
shared server count whatever else they ran too) and the load average at its end; per round,
syncd / floor. Then the medians, and syncd / floor of the medians. The machine this runs on
swings from one run to the next (two cores here, shared): read the per-round ratios and the
load beside each figure, not one run.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
from pathlib import Path

from common import (
    INDEXER,
    CpuMeter,
    checkpoint,
    embedded_config,
    postgres_config,
    syncd_run,
    throwaway_database,
    throwaway_prefix,
    wait_for_source,
    worker_shape,
)
from queued_floor import postgres_floor, sqlite_queued_floor
from sourceserver import SourceProcess

from syncd.daemon import Daemon
from syncd.daemon.heap import tune_collector
from syncd.observability.logs import configure_logging


def _figure(n: int, seconds: float, cpu: dict[str, float]) -> dict[str, float]:
    return {
        "rate": n / seconds,
        "client": cpu["client"] / n * 1e6,
        "postgres": cpu["postgres"] / n * 1e6,
        "redis": cpu["redis"] / n * 1e6,
        "load": os.getloadavg()[0],
    }


def _line(name: str, f: dict[str, float], postgres: bool) -> str:
    servers = f", postgres {f['postgres']:5.1f}, redis {f['redis']:4.1f}" if postgres else ""
    return (
        f"{name:>5}: everything indexed {f['rate']:8.0f} docs/s; CPU µs/doc this process "
        f"{f['client']:5.1f}{servers}; load {f['load']:.2f}"
    )


async def _run_round(
    args: argparse.Namespace, backend: str, url: str, meter: CpuMeter, first: str
) -> dict[str, dict[str, float]]:
    """One round: the floor and syncd, ``first`` first, each on a fresh store."""
    concurrency, batch = worker_shape(args)
    out: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        for phase in (first, "syncd" if first == "floor" else "floor"):
            cpu: dict[str, float] = {}
            if backend == "sqlite":
                if phase == "floor":
                    with meter.measure(cpu):
                        _, _, seconds = await sqlite_queued_floor(
                            url, tmp / "floor.db", workers=concurrency, batch_size=batch
                        )
                else:
                    async with Daemon(embedded_config(tmp, args), serve_api=False) as daemon:
                        with meter.measure(cpu):
                            _, seconds = await syncd_run(daemon, url, args.records)
            else:
                async with (
                    throwaway_database(args.postgres_dsn) as dsn,
                    throwaway_prefix(args.redis_url) as prefix,
                ):
                    if phase == "floor":
                        _, _, seconds = await postgres_floor(args, url, dsn, prefix, meter, cpu)
                    else:
                        config = postgres_config(dsn, args.redis_url, prefix, args)
                        async with Daemon(config, serve_api=False) as daemon:
                            with meter.measure(cpu):
                                _, seconds = await syncd_run(daemon, url, args.records)
                    await checkpoint(dsn)
            out[phase] = _figure(args.records, seconds, cpu)
    return out


async def _backend(args: argparse.Namespace, backend: str) -> None:
    postgres = backend == "postgres"
    concurrency, batch = worker_shape(args)
    pair = "PostgreSQL + Redis" if postgres else "SQLite + memory://"
    print(
        f"== {pair}: {args.records} records of ~1 KB in pages of {args.page_size}, "
        f"{concurrency} workers, batches of {batch}, {args.runs} rounds"
    )
    rounds: list[dict[str, dict[str, float]]] = []
    with SourceProcess(args.records, args.page_size) as source:
        await wait_for_source(source.url)
        meter = CpuMeter(source.pid)
        for i in range(args.runs):
            first = "floor" if i % 2 == 0 else "syncd"
            figures = await _run_round(args, backend, source.url, meter, first)
            rounds.append(figures)
            for phase in (first, "syncd" if first == "floor" else "floor"):
                print(f"   round {i + 1} " + _line(phase, figures[phase], postgres))
            ratio = figures["syncd"]["rate"] / figures["floor"]["rate"]
            print(f"   round {i + 1} syncd / floor: {ratio:.2f}")
    medians = {
        phase: {k: statistics.median(r[phase][k] for r in rounds) for k in rounds[0][phase]}
        for phase in ("floor", "syncd")
    }
    loads = [r[p]["load"] for r in rounds for p in r]
    print(f"   medians of {args.runs} (load {min(loads):.2f} to {max(loads):.2f}):")
    for phase in ("floor", "syncd"):
        print("   " + _line(phase, medians[phase], postgres))
    per_round = ", ".join(f"{r['syncd']['rate'] / r['floor']['rate']:.2f}" for r in rounds)
    ratio = medians["syncd"]["rate"] / medians["floor"]["rate"]
    print(
        f"   syncd / floor, everything indexed: {ratio:.2f} (target >= 0.85); per round {per_round}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--backend", choices=("sqlite", "postgres", "both"), default="sqlite")
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--page-size", type=int, default=500)
    parser.add_argument("--runs", type=int, default=3, help="rounds (medians of these)")
    parser.add_argument("--workers", type=int, help="syncd [workers] concurrency (floor: same)")
    parser.add_argument("--worker-batch-size", type=int, help="syncd [workers] batch_size")
    parser.add_argument(
        "--postgres-dsn",
        default="postgresql://postgres@127.0.0.1:5432/postgres",
        help="server on which throwaway databases are created",
    )
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/0")
    args = parser.parse_args()
    tune_collector()  # as syncd run does; for the floor alike
    INDEXER["type"] = "queued"
    configure_logging("warning", "console")
    backends = ("sqlite", "postgres") if args.backend == "both" else (args.backend,)
    for backend in backends:
        asyncio.run(_backend(args, backend))


if __name__ == "__main__":
    main()
