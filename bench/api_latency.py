"""Control API latency while connectors sync, next to the same load on the idle daemon.

    python bench/api_latency.py                         # embedded: SQLite + in-process queue
    python bench/api_latency.py --backend postgres      # PostgreSQL + Redis
    python bench/api_latency.py --backend both --rate 500 1000   # both pairs, both rates
    python bench/api_latency.py --seconds 3 --rounds 1  # a quick check

Each round starts a daemon on a fresh store (a temporary SQLite file, or a throwaway
PostgreSQL database and Redis key prefix, removed afterwards) serving its API on a free local
port, creates ``--connectors`` connectors on a slow local source (``bench/sourceserver.py``,
every page ``--page-delay`` seconds late) and triggers them all. After ``--warmup`` seconds an
open-loop client in a process of its own (so that its CPU does not run on the daemon's loop)
sends ``--rate`` requests/s for ``--seconds`` seconds: four ``GET /connectors/{id}`` (the
connectors in turn) for one ``GET /connectors``. Latency is counted from the time a request
was due, not sent, so a client that falls behind does not hide a slow server; a request not
answered within ``--timeout`` seconds is a timeout. Then every run is aborted and the same
load measures the idle daemon, with the documents the syncs wrote. The benchmark samples the
daemon's event-loop lag (a timer every 100 ms) during each phase. As ``syncd run`` does, the
garbage collector is tuned once the daemon has started (``syncd.daemon.heap``), unless
``--default-gc``.

Printed: each round, then the medians of the rounds, and the machine's load average.
``bench/README.md`` has the details and figures.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import io
import json
import os
import pstats
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import (
    CpuMeter,
    describe_cpu,
    safe_dsn,
    source_body,
    throwaway_database,
    throwaway_prefix,
    wait_for_source,
)
from sourceserver import SourceProcess

from syncd.config import Config
from syncd.daemon import Daemon
from syncd.daemon.heap import tune_collector
from syncd.models import DocStatus
from syncd.observability.logs import configure_logging

HERE = Path(__file__).resolve()
TARGET_P99_MS = 10.0
LIST_EVERY = 5  # one GET /connectors in five requests

# --- the client (a process of its own) ------------------------------------------------------


def _pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def _summary(latencies: list[float]) -> dict[str, float]:
    return {
        "p50": _pct(latencies, 0.50) * 1000,
        "p90": _pct(latencies, 0.90) * 1000,
        "p95": _pct(latencies, 0.95) * 1000,
        "p99": _pct(latencies, 0.99) * 1000,
        "max": (max(latencies) if latencies else float("nan")) * 1000,
    }


async def client(
    url: str, ids: list[str], rate: float, seconds: float, timeout: float
) -> dict[str, Any]:
    """Send the request mix open-loop; latency percentiles (ms), timeouts and errors."""
    loop = asyncio.get_running_loop()
    by_kind: dict[str, list[float]] = {"get": [], "list": []}
    counts = {"timeouts": 0, "errors": 0, "non_200": 0}
    connector = aiohttp.TCPConnector(limit=256)
    limits = aiohttp.ClientTimeout(total=timeout)
    async with aiohttp.ClientSession(connector=connector, timeout=limits) as session:
        # One request first: the connection pool and the daemon's route cache are warm.
        warm = aiohttp.ClientTimeout(total=60)
        async with session.get(f"{url}/connectors/{ids[0]}", timeout=warm) as r:
            await r.read()

        async def one(i: int, due: float) -> None:
            kind = "list" if i % LIST_EVERY == LIST_EVERY - 1 else "get"
            path = "/connectors" if kind == "list" else f"/connectors/{ids[i % len(ids)]}"
            try:
                async with session.get(url + path) as response:
                    await response.read()
                    if response.status != 200:
                        counts["non_200"] += 1
            except TimeoutError:
                counts["timeouts"] += 1
                return
            except aiohttp.ClientError:
                counts["errors"] += 1
                return
            by_kind[kind].append(loop.time() - due)

        tasks: list[asyncio.Task[None]] = []
        total = int(rate * seconds)
        start = loop.time() + 0.05
        for i in range(total):
            due = start + i / rate
            wait = due - loop.time()
            if wait > 0:
                await asyncio.sleep(wait)
            tasks.append(asyncio.create_task(one(i, due)))
        await asyncio.gather(*tasks)
    every = by_kind["get"] + by_kind["list"]
    return {
        "requests": total,
        "all": _summary(every),
        "get": _summary(by_kind["get"]),
        "list": _summary(by_kind["list"]),
        **counts,
    }


def client_main(args: argparse.Namespace) -> None:
    result = asyncio.run(
        client(args.client, args.ids.split(","), args.rate[0], args.seconds, args.timeout)
    )
    print(json.dumps(result))


async def sample_lag(into: list[float], interval: float = 0.1) -> None:
    """How late a 100 ms timer wakes on the daemon's loop, forever (as the daemon's own
    ``syncd_event_loop_lag_seconds`` samples it; kept here so that the benchmark also runs
    against versions without it)."""
    loop = asyncio.get_running_loop()
    while True:
        due = loop.time() + interval
        await asyncio.sleep(interval)
        into.append(max(0.0, loop.time() - due))


async def run_client(
    url: str, ids: list[str], args: argparse.Namespace
) -> tuple[dict[str, Any], list[float]]:
    """The client's summary, and the event-loop lags sampled meanwhile (seconds)."""
    lags: list[float] = []
    watcher = asyncio.create_task(sample_lag(lags))
    try:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            str(HERE),
            "--client",
            url,
            "--ids",
            ",".join(ids),
            "--rate",
            str(args.rate),
            "--seconds",
            str(args.seconds),
            "--timeout",
            str(args.timeout),
            stdout=subprocess.PIPE,
        )
        out, _ = await proc.communicate()
        if proc.returncode != 0:
            raise SystemExit(f"the client failed with exit code {proc.returncode}")
    finally:
        watcher.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watcher
    return json.loads(out), lags


# --- the daemon -----------------------------------------------------------------------------


@contextlib.asynccontextmanager
async def fresh_config(args: argparse.Namespace) -> AsyncIterator[Config]:
    """The configuration of one round's daemon, on a store and queue of its own."""
    sections: dict[str, Any] = {
        "api": {"listen": "127.0.0.1:0"},
        "log": {"level": "info", "format": "json", "access": args.access_log},
    }
    if args.backend == "sqlite":
        with tempfile.TemporaryDirectory() as tmp:
            sections["store"] = {"url": f"sqlite:///{Path(tmp) / 'syncd.db'}"}
            sections["queue"] = {"url": "memory://"}
            yield Config.from_mapping(sections, environ={})
        return
    async with (
        throwaway_database(args.postgres_dsn) as dsn,
        throwaway_prefix(args.redis_url) as prefix,
    ):
        sections["store"] = {"url": dsn}
        sections["queue"] = {"url": args.redis_url, "prefix": prefix}
        yield Config.from_mapping(sections, environ={})


@dataclass
class Phase:
    client: dict[str, Any]
    lags: list[float]
    documents: int = 0
    pages: int = 0  # pages the syncs committed meanwhile
    cpu: dict[str, float] = field(default_factory=dict)
    wall: float = 0.0
    load: float = 0.0  # the one-minute load average at its end


@dataclass
class Round:
    load: Phase
    idle: Phase


async def documents(daemon: Daemon) -> int:
    return sum((await daemon.store.document_totals()).values())


async def pages(daemon: Daemon, ids: list[str]) -> int:
    """Pages the connectors' current runs have committed so far."""
    total = 0
    for connector_id in ids:
        connector = await daemon.store.get_connector(connector_id)
        total += connector.progress.pages if connector is not None else 0
    return total


async def one_round(args: argparse.Namespace, source_url: str, meter: CpuMeter) -> Round:
    async with fresh_config(args) as config, Daemon(config) as daemon:
        if not args.default_gc:
            tune_collector()  # as syncd run does once started
        url = daemon.api_address
        assert url is not None and url.startswith("http")
        if args.skip_counts:
            # Diagnostic: what the API costs without counting documents per read.
            zero = dict.fromkeys(DocStatus, 0)

            async def no_counts(connector_id: str) -> dict[DocStatus, int]:
                return zero

            daemon.service.document_counts = no_counts  # type: ignore[method-assign]
        ids = []
        for i in range(args.connectors):
            body = {"name": f"bench-{i}", "source": source_body(source_url)}
            ids.append((await daemon.create_connector(body)).id)
        for connector_id in ids:
            await daemon.trigger_sync(connector_id)
        await asyncio.sleep(args.warmup)

        cpu: dict[str, float] = {}
        before, pages_before = await documents(daemon), await pages(daemon, ids)
        started = time.perf_counter()
        profile = cProfile.Profile() if args.profile else None
        with meter.measure(cpu):
            if profile is not None:
                profile.enable()
            summary, lags = await run_client(url, ids, args)
            if profile is not None:
                profile.disable()
                dump_profile(profile, args.profile)
                args.profile = None  # the first round only
        load = Phase(summary, lags, cpu=cpu, wall=time.perf_counter() - started)
        load.documents = await documents(daemon) - before
        load.pages = await pages(daemon, ids) - pages_before
        load.load = os.getloadavg()[0]
        still = [c for c in ids if c in daemon.engine.running]
        if len(still) < len(ids):
            print(f"  warning: {len(ids) - len(still)} syncs ended before the load did")

        for connector_id in ids:
            await daemon.abort_sync(connector_id)
        for connector_id in ids:
            await daemon.wait_run(connector_id)

        cpu = {}
        started = time.perf_counter()
        with meter.measure(cpu):
            summary, lags = await run_client(url, ids, args)
        idle = Phase(summary, lags, cpu=cpu, wall=time.perf_counter() - started)
        idle.documents = await documents(daemon)
        idle.load = os.getloadavg()[0]
    return Round(load, idle)


def dump_profile(profile: cProfile.Profile, path: Path) -> None:
    profile.dump_stats(path)
    text = io.StringIO()
    pstats.Stats(profile, stream=text).strip_dirs().sort_stats("cumulative").print_stats(40)
    print(f"--- profile of the daemon's loop under load ({path}), top 40 by cumulative time ---")
    print(text.getvalue().split("\n", 3)[-1].strip("\n"))


# --- report ---------------------------------------------------------------------------------


def describe(name: str, phase: Phase) -> str:
    c = phase.client
    a = c["all"]
    lag = _summary(phase.lags)
    return (
        f"{name:<22} p50 {a['p50']:7.1f}  p90 {a['p90']:7.1f}  p99 {a['p99']:7.1f}  "
        f"max {a['max']:7.1f} ms  timeouts {c['timeouts']:5d}  errors {c['errors'] + c['non_200']}"
        f"  | GET one p99 {c['get']['p99']:.1f}, list p99 {c['list']['p99']:.1f} ms"
        f"  | loop lag p50 {lag['p50']:.1f} p99 {lag['p99']:.1f} max {lag['max']:.1f} ms"
    )


def median_phase(phases: list[Phase]) -> Phase:
    """Field-wise medians of the rounds' figures (lags pooled)."""

    def med(kind: str, key: str) -> float:
        return statistics.median(p.client[kind][key] for p in phases)

    client = {
        kind: {key: med(kind, key) for key in ("p50", "p90", "p95", "p99", "max")}
        for kind in ("all", "get", "list")
    }
    for key in ("timeouts", "errors", "non_200"):
        client[key] = int(statistics.median(p.client[key] for p in phases))  # type: ignore[assignment]
    phase = Phase(client, [lag for p in phases for lag in p.lags])
    phase.documents = int(statistics.median(p.documents for p in phases))
    phase.pages = int(statistics.median(p.pages for p in phases))
    phase.wall = statistics.median(p.wall for p in phases)
    phase.load = statistics.median(p.load for p in phases)
    return phase


def load_average() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.2f} {five:.2f} {fifteen:.2f} ({os.cpu_count()} CPUs)"


async def bench_all(args: argparse.Namespace) -> None:
    """Every backend pair and rate asked for, one after the other, each in its rounds."""
    backends = ("sqlite", "postgres") if args.backend == "both" else (args.backend,)
    rates = list(args.rate)
    results = []
    for backend in backends:
        for rate in rates:
            one = argparse.Namespace(**{**vars(args), "backend": backend, "rate": rate})
            results.append((backend, rate, await bench(one)))
            print()
    if len(results) > 1:
        print("summary (medians of the rounds; latency in ms; load = 1-minute load average):")
        for backend, rate, (load, idle) in results:
            a = load.client["all"]
            print(
                f"  {backend:<8} {rate:6.0f}/s  syncing: p50 {a['p50']:.1f} p90 {a['p90']:.1f} "
                f"p99 {a['p99']:.1f} max {a['max']:.1f}, {load.pages / load.wall:,.0f} pages/s, "
                f"timeouts {load.client['timeouts']}, errors "
                f"{load.client['errors'] + load.client['non_200']}, load {load.load:.2f}"
                f"  | idle p99 {idle.client['all']['p99']:.1f}"
            )


async def bench(args: argparse.Namespace) -> tuple[Phase, Phase]:
    # Enough pages that no sync ends before the load does, at the source's pace.
    pages = int((args.warmup + args.seconds + 10) / max(args.page_delay, 0.01)) + 2
    records = pages * args.page_size
    print(
        f"backend {args.backend}"
        + (
            f" ({safe_dsn(args.postgres_dsn)}, {args.redis_url})"
            if args.backend != "sqlite"
            else ""
        )
        + f"; {args.connectors} connectors syncing pages of {args.page_size} records of ~"
        f"{args.record_size} B, each page {args.page_delay * 1000:.0f} ms late; "
        f"{args.rate:.0f} requests/s for {args.seconds:g} s (1 in {LIST_EVERY} GET /connectors)"
    )
    print(load_average())
    with SourceProcess(records, args.page_size, args.record_size, args.page_delay) as source:
        await wait_for_source(source.url)
        meter = CpuMeter(source.pid)
        rounds: list[Round] = []
        for n in range(1, args.rounds + 1):
            r = await one_round(args, source.url, meter)
            rounds.append(r)
            print(f"round {n}: {load_average()}")
            print(
                "  "
                + describe("20 syncs running" if args.connectors == 20 else "syncs running", r.load)
            )
            print(
                f"    {r.load.pages / r.load.wall:,.0f} pages/s, "
                f"{r.load.documents / r.load.wall:,.0f} docs/s written meanwhile (load "
                f"{r.load.load:.2f}); " + describe_cpu(r.load.cpu, r.load.wall)
            )
            print("  " + describe("idle daemon", r.idle))
            print("    " + describe_cpu(r.idle.cpu, r.idle.wall))
    load, idle = median_phase([r.load for r in rounds]), median_phase([r.idle for r in rounds])
    print(f"medians of {len(rounds)} rounds (latency from the time each request was due):")
    print("  " + describe("syncs running", load))
    print("  " + describe("idle daemon", idle))
    ok = load.client["all"]["p99"] < TARGET_P99_MS and load.client["timeouts"] == 0
    print(
        f"target under load: p99 < {TARGET_P99_MS:.0f} ms and no timeouts: "
        + ("met" if ok else "NOT met")
    )
    print(f"documents at the end of a round (median): {idle.documents:,}")
    print(load_average())
    return load, idle


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", choices=("sqlite", "postgres", "both"), default="sqlite")
    parser.add_argument("--seconds", type=float, default=30.0, help="length of each load")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--rate", type=float, nargs="+", default=[500.0], help="requests per second (each)"
    )
    parser.add_argument("--timeout", type=float, default=1.0, help="seconds per request")
    parser.add_argument("--connectors", type=int, default=20)
    parser.add_argument("--warmup", type=float, default=3.0, help="seconds of syncing first")
    parser.add_argument("--page-size", type=int, default=100)
    parser.add_argument("--record-size", type=int, default=1000)
    parser.add_argument("--page-delay", type=float, default=0.1, help="seconds per page")
    parser.add_argument("--postgres-dsn", default="postgresql://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/0")
    parser.add_argument(
        "--access-log", action="store_true", help="log.access = true (lines to /dev/null)"
    )
    parser.add_argument(
        "--default-gc",
        action="store_true",
        help="keep CPython's collector settings (syncd run tunes them: syncd.daemon.heap)",
    )
    parser.add_argument(
        "--skip-counts",
        action="store_true",
        help="diagnostic: answer every connector with zero documents instead of counting them",
    )
    parser.add_argument(
        "--profile", type=Path, help="cProfile the daemon's loop under load (first round)"
    )
    # The client process's own options.
    parser.add_argument("--client", help=argparse.SUPPRESS)
    parser.add_argument("--ids", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.client:
        client_main(args)
    else:
        # The daemon's own logging, JSON lines at info level, written where nobody reads them.
        with open(os.devnull, "w") as devnull:
            configure_logging("info", "json", stream=devnull)
            asyncio.run(bench_all(args))


if __name__ == "__main__":
    main()
