"""Scale-out: N ``syncd run`` processes on one PostgreSQL + Redis, latency-bound sources.

    python bench/scale_out.py                                # 1, 2 and 4 instances, 3 rounds
    python bench/scale_out.py --instances 1,2 --rounds 1     # a quick run
    python bench/scale_out.py --connectors 128 --pages 5 --delay 0.1

Each round starts N real ``syncd run`` subprocesses, each with a configuration file of its
own: the same ``[store] url`` (a database created for the round) and ``[queue] url`` and
``prefix`` (a key prefix of its own, deleted afterwards), its own API port, and ``[sync]
max_concurrent_runs`` (8). ``--connectors`` connectors (64) are created through the HTTP API
(spread over the instances) on a local source in its own process (``bench/sourceserver.py``)
that answers every page ``--delay`` seconds late (0.2 s), ``--pages`` pages (10) each. Then
every connector is triggered through the API of the first instance (``--trigger-via first``,
the default) or of each instance in turn (``spread``). A trigger that finds no free slot is
queued in the store (202, ``sync_status`` ``queued``) and is started by whichever instance
has a slot first: the queueing instance broadcasts a wake-up on the queue's control channel,
and each instance's freed slot starts the oldest queued trigger. No tick is waited for.

Timed: from the first trigger sent until the last run's ``finished_at`` (read back from the
runs). The end is detected from the ``sync.ended`` lines of each instance's log (or, with
``--log-level`` above info, its ``GET /metrics``), so that watching adds no store work and
costs the instances nothing. Then every instance is stopped (SIGTERM, then waited for), and
the store's counters are read: statements from ``pg_stat_statements`` when the server loads
it, else transactions from ``pg_stat_database`` (the delta from just before the triggers to
after the stop; a backend flushes its counters within about 10 s of going idle, and at exit,
hence the ``--settle`` wait before the first reading). A fresh ``syncd run`` then answers the
checks through the API: every connector has exactly one run (none twice, none lost), manual,
succeeded, with every page.

Printed: each round, then per instance count the medians of ``--rounds`` (wall, pages/s,
speed-up against one instance, store work per run, runs per instance) and the load average
(the machine may be shared: the CPU seconds the benchmark's processes used are printed next
to the machine's total for the same window). Every subprocess is stopped and the database
and keys are removed also when a round fails. ``bench/README.md`` has the details and
figures.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import socket
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import aiohttp
import asyncpg
import redis.asyncio as aioredis

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import safe_dsn, source_body, wait_for_source, with_database
from sourceserver import SourceProcess

ROOT = Path(__file__).resolve().parent.parent  # the syncd each instance runs
_TICK = os.sysconf("SC_CLK_TCK")
STOP_TIMEOUT = 30.0  # seconds a SIGTERM'd instance gets before SIGKILL
READY_TIMEOUT = 60.0
POLL_SECONDS = 0.2  # how often the end is looked for (the wall time is read from the runs)


# --- processes ------------------------------------------------------------------------------


def _proc_cpu(pid: int) -> float:
    """CPU seconds (user + system) of a live process; 0 once it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / _TICK


def _server_cpu() -> dict[str, float]:
    """CPU seconds of every live ``postgres`` and ``redis-server`` process on the machine."""
    out = {"postgres": 0.0, "redis": 0.0}
    for entry in Path("/proc").glob("[0-9]*"):
        with contextlib.suppress(OSError, ValueError):
            comm = (entry / "comm").read_text().strip()
            if comm == "postgres" or comm.startswith("redis-server"):
                out["postgres" if comm == "postgres" else "redis"] += _proc_cpu(int(entry.name))
    return out


def _machine_busy() -> float:
    """CPU seconds the whole machine spent busy (not idle or iowait) since boot."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
    return (sum(fields[:8]) - idle) / _TICK


def load_average() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.2f} {five:.2f} {fifteen:.2f} ({os.cpu_count()} CPUs)"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _toml(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    return '"' + str(value).replace("\\", "\\\\").replace('"', '\\"') + '"'


def write_config(path: Path, sections: dict[str, dict[str, Any]]) -> None:
    lines: list[str] = []
    for name, keys in sections.items():
        lines.append(f"[{name}]")
        lines.extend(f"{key} = {_toml(value)}" for key, value in keys.items())
        lines.append("")
    path.write_text("\n".join(lines))


class Instance:
    """One ``syncd run`` subprocess with its own configuration file, port and log file."""

    def __init__(self, name: str, workdir: Path, sections: dict[str, dict[str, Any]]) -> None:
        self.name = name
        self.port = free_port()
        sections = {**sections, "api": {"listen": f"127.0.0.1:{self.port}"}}
        sections["daemon"] = {**sections.get("daemon", {}), "instance_id": name}
        self.config = workdir / f"{name}.toml"
        self.log = workdir / f"{name}.log"
        write_config(self.config, sections)
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: asyncio.subprocess.Process | None = None

    async def start(self) -> None:
        # Only the configuration file configures the instance: no SYNCD_* override leaks in.
        # A session of its own: a Ctrl-C reaches the benchmark only, which stops every instance
        # with one SIGTERM (a second signal would make it exit at once, not gracefully).
        env = {k: v for k, v in os.environ.items() if not k.startswith("SYNCD_")}
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
        with self.log.open("ab") as log:
            self.proc = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "syncd", "run", "--config", str(self.config),
                stdin=asyncio.subprocess.DEVNULL, stdout=log, stderr=log, env=env,
                start_new_session=True,
            )  # fmt: skip

    def log_tail(self, lines: int = 15) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    async def wait_ready(self, session: aiohttp.ClientSession) -> None:
        deadline = time.monotonic() + READY_TIMEOUT
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.returncode is not None:
                raise RuntimeError(
                    f"{self.name} exited with {self.proc.returncode}:\n{self.log_tail()}"
                )
            with contextlib.suppress(aiohttp.ClientError, OSError):
                async with session.get(self.url + "/readyz") as r:
                    if r.status == 200:
                        return
            await asyncio.sleep(0.1)
        raise RuntimeError(f"{self.name} not ready after {READY_TIMEOUT:.0f} s:\n{self.log_tail()}")

    def cpu(self) -> float:
        return _proc_cpu(self.proc.pid) if self.proc is not None else 0.0

    async def stop(self) -> int | None:
        """SIGTERM, wait; SIGKILL if it does not exit within ``STOP_TIMEOUT``."""
        proc = self.proc
        if proc is None:
            return None
        if proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(proc.wait(), STOP_TIMEOUT)
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                await proc.wait()
                print(f"  {self.name} did not stop within {STOP_TIMEOUT:.0f} s: killed")
        return proc.returncode


@contextlib.asynccontextmanager
async def instances(
    count: int, workdir: Path, sections: dict[str, dict[str, Any]], prefix: str = "syncd"
) -> AsyncIterator[list[Instance]]:
    """``count`` started, ready instances; every one stopped on the way out."""
    started = [Instance(f"{prefix}-{i + 1}", workdir, sections) for i in range(count)]
    try:
        for inst in started:
            await inst.start()
        async with aiohttp.ClientSession() as session:
            await asyncio.gather(*(inst.wait_ready(session) for inst in started))
        yield started
    finally:
        # Shielded: a cancelled benchmark (Ctrl-C) still waits for its children to stop.
        codes = await asyncio.shield(asyncio.gather(*(inst.stop() for inst in started)))
        for inst, code in zip(started, codes, strict=True):
            if code not in (None, 0):
                print(f"  {inst.name} exited with {code}:\n{inst.log_tail()}")


# --- the store and the queue ----------------------------------------------------------------


@contextlib.asynccontextmanager
async def round_database(dsn: str, name: str) -> AsyncIterator[str]:
    """A database ``name`` on ``dsn``'s server for one round; dropped afterwards."""
    admin = await asyncpg.connect(dsn)
    try:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.execute(f'CREATE DATABASE "{name}"')
    finally:
        await admin.close()
    try:
        yield with_database(dsn, name)
    finally:

        async def drop() -> None:
            conn = await asyncpg.connect(dsn)
            try:
                await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            finally:
                await conn.close()

        await asyncio.shield(drop())


async def delete_keys(redis_url: str, prefix: str) -> int:
    client = aioredis.Redis.from_url(redis_url)
    deleted = 0
    try:
        batch: list[bytes] = []
        async for key in client.scan_iter(match=f"{prefix}:*", count=1000):
            batch.append(key)
            if len(batch) >= 1000:
                deleted += await client.unlink(*batch)
                batch.clear()
        if batch:
            deleted += await client.unlink(*batch)
    finally:
        await client.aclose()
    return deleted


class StoreMeter:
    """Statements (``pg_stat_statements``, when the server loads it) or else transactions
    (``pg_stat_database``: commits + rollbacks) of one database."""

    def __init__(self, admin_dsn: str, database: str, dsn: str, statements: bool) -> None:
        self.admin_dsn, self.database, self.dsn = admin_dsn, database, dsn
        self.statements = statements

    @property
    def unit(self) -> str:
        return "statements" if self.statements else "transactions"

    async def prepare(self) -> None:
        if self.statements:
            conn = await asyncpg.connect(self.dsn)
            try:
                await conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
            finally:
                await conn.close()

    async def read(self) -> int:
        if self.statements:
            conn = await asyncpg.connect(self.dsn)
            try:
                # This reading's own statements are left out by their text.
                value = await conn.fetchval(
                    "SELECT coalesce(sum(calls), 0) FROM pg_stat_statements "
                    "WHERE dbid = (SELECT oid FROM pg_database WHERE datname = $1) "
                    "AND query NOT ILIKE '%pg_stat_statements%'",
                    self.database,
                )
            finally:
                await conn.close()
            return int(value)
        conn = await asyncpg.connect(self.admin_dsn)
        try:
            value = await conn.fetchval(
                "SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = $1",
                self.database,
            )
        finally:
            await conn.close()
        return int(value or 0)

    async def wait_disconnected(self, timeout: float = 15.0) -> bool:
        """Wait until no backend serves the database (so every counter has been flushed)."""
        conn = await asyncpg.connect(self.admin_dsn)
        try:
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                n = await conn.fetchval(
                    "SELECT count(*) FROM pg_stat_activity WHERE datname = $1", self.database
                )
                if n == 0:
                    return True
                await asyncio.sleep(0.1)
            return False
        finally:
            await conn.close()


async def statements_available(dsn: str) -> bool:
    conn = await asyncpg.connect(dsn)
    try:
        loaded = await conn.fetchval("SELECT current_setting('shared_preload_libraries')")
        present = await conn.fetchval(
            "SELECT count(*) FROM pg_available_extensions WHERE name = 'pg_stat_statements'"
        )
    finally:
        await conn.close()
    libraries = [x.strip().strip('"') for x in (loaded or "").split(",")]
    return "pg_stat_statements" in libraries and bool(present)


# --- the API client -------------------------------------------------------------------------


async def api(
    session: aiohttp.ClientSession, method: str, url: str, body: Any = None, ok: tuple = (200,)
) -> Any:
    async with session.request(method, url, json=body) as r:
        payload = await r.json(content_type=None)
        if r.status not in ok:
            raise RuntimeError(f"{method} {url}: {r.status} {payload}")
        return payload


async def runs_from_metrics(session: aiohttp.ClientSession, inst: Instance) -> int:
    """Runs ``inst`` has finished so far, from its ``GET /metrics`` (``syncd_runs_total``)."""
    async with session.get(inst.url + "/metrics") as r:
        text = await r.text()
    return int(
        sum(
            float(x.rsplit(" ", 1)[1])
            for x in text.splitlines()
            if x.startswith("syncd_runs_total{")
        )
    )


class EndedLines:
    """Counts the ``sync.ended`` lines of an instance's JSON log as they are written: watching
    the end costs the instances nothing (a ``/metrics`` render is several ms of their CPU)."""

    def __init__(self, inst: Instance) -> None:
        self.inst = inst
        self.count = 0
        self._offset = 0
        self._partial = b""

    def read(self) -> int:
        with self.inst.log.open("rb") as f:
            f.seek(self._offset)
            data = f.read()
        self._offset += len(data)
        lines = (self._partial + data).split(b"\n")
        self._partial = lines.pop()
        for line in lines:
            if b"sync.ended" in line:
                with contextlib.suppress(ValueError):
                    self.count += json.loads(line).get("event") == "sync.ended"
        return self.count


def _ts(value: str | None) -> float | None:
    if value is None:
        return None
    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


# --- one round ------------------------------------------------------------------------------


@dataclass
class Round:
    instances: int
    wall: float = 0.0  # first trigger → the last run's finished_at
    slots_busy: float = 0.0  # first trigger → every slot running (the (slots)-th start)
    run_length: float = 0.0  # median started_at → finished_at of a run
    detected: float = 0.0  # first trigger → every run seen ended (logs or metrics)
    runs: int = 0
    pages: int = 0
    queued: int = 0  # triggers answered "queued" (no free slot where they were sent)
    store: int = 0  # statements or transactions, triggers to stop
    by_owner: dict[str, int] = field(default_factory=dict)
    cpu: dict[str, float] = field(default_factory=dict)
    twice: int = 0  # connectors with more than one run
    lost: int = 0  # connectors with no run
    failed: int = 0  # runs not manual, not succeeded, or short of pages
    load: tuple[float, float, float] = (0.0, 0.0, 0.0)
    problems: list[str] = field(default_factory=list)
    ids: list[str] = field(default_factory=list)
    t0: float = 0.0


async def one_round(
    args: argparse.Namespace, n: int, source_url: str, seq: int, statements: bool
) -> Round:
    result = Round(instances=n)
    database = f"syncd_bench_scale_{os.getpid()}_{seq}"
    prefix = f"syncd-bench-scale-{os.getpid()}-{seq}"
    try:
        async with round_database(args.postgres_dsn, database) as dsn:
            meter = StoreMeter(args.postgres_dsn, database, dsn, statements)
            await meter.prepare()
            with tempfile.TemporaryDirectory(prefix="syncd-scale-") as tmp:
                sections: dict[str, dict[str, Any]] = {
                    "store": {"url": dsn},
                    "queue": {"url": args.redis_url, "prefix": prefix},
                    "scheduler": {"tick_seconds": args.tick_seconds},
                    "sync": {"max_concurrent_runs": args.max_concurrent_runs},
                    "log": {"level": args.log_level, "format": "json"},
                }
                await measure(args, n, source_url, Path(tmp), sections, meter, result)
                await check(args, Path(tmp), sections, result)
    finally:
        await asyncio.shield(delete_keys(args.redis_url, prefix))
    return result


async def measure(
    args: argparse.Namespace,
    n: int,
    source_url: str,
    tmp: Path,
    sections: dict[str, dict[str, Any]],
    meter: StoreMeter,
    result: Round,
) -> None:
    body_source = source_body(source_url)
    async with instances(n, tmp, sections) as insts, aiohttp.ClientSession() as session:
        created = await asyncio.gather(
            *(
                api(
                    session,
                    "POST",
                    insts[i % n].url + "/connectors",
                    {"name": f"scale-{i:04d}", "source": body_source},
                    ok=(201,),
                )
                for i in range(args.connectors)
            )
        )
        ids = [c["id"] for c in created]
        # The logs say when each run ended, unless the level hides ``sync.ended`` (info).
        quiet = args.log_level.lower() not in ("debug", "info")
        watchers = None if quiet else [EndedLines(inst) for inst in insts]
        for w in watchers or ():
            w.read()  # start after what the start-up wrote
        await asyncio.sleep(0 if meter.statements else args.settle)
        store_before = await meter.read()
        cpu_before = {inst.name: inst.cpu() for inst in insts}
        servers_before, busy_before = _server_cpu(), _machine_busy()

        targets = [insts[0]] * len(ids) if args.trigger_via == "first" else insts
        t0 = time.time()
        answers = await asyncio.gather(
            *(
                api(
                    session,
                    "POST",
                    targets[i % len(targets)].url + f"/connectors/{cid}/sync",
                    ok=(202,),
                )
                for i, cid in enumerate(ids)
            )
        )
        result.queued = sum(1 for a in answers if a.get("sync_status") == "queued")

        timeout = 60.0 + 10 * args.connectors * args.pages * args.delay
        while True:
            if watchers is not None:
                ended = sum(w.read() for w in watchers)
            else:
                ended = sum(
                    await asyncio.gather(*(runs_from_metrics(session, inst) for inst in insts))
                )
            if ended >= len(ids):
                break
            if time.time() - t0 > timeout:
                result.problems.append(f"only {ended} of {len(ids)} runs ended in {timeout:.0f} s")
                break
            for inst in insts:
                if inst.proc is not None and inst.proc.returncode is not None:
                    raise RuntimeError(f"{inst.name} exited mid-round:\n{inst.log_tail()}")
            await asyncio.sleep(POLL_SECONDS)
        result.detected = time.time() - t0
        result.load = os.getloadavg()
        result.cpu = {
            "instances": sum(inst.cpu() - cpu_before[inst.name] for inst in insts),
            # A process that exits in the window takes its time with it: never below zero.
            **{k: max(0.0, v - servers_before[k]) for k, v in _server_cpu().items()},
            "machine": _machine_busy() - busy_before,
        }
        result.cpu["window"] = time.time() - t0
    # Every instance has stopped: once their backends are gone every counter is flushed.
    if not await meter.wait_disconnected():
        result.problems.append("backends still connected after the stop: store counts low")
    result.store = await meter.read() - store_before
    result.ids, result.t0 = ids, t0


async def check(
    args: argparse.Namespace, tmp: Path, sections: dict[str, dict[str, Any]], result: Round
) -> None:
    """Read every connector's runs back through the API of a fresh instance."""
    ids, t0 = result.ids, result.t0
    starts: list[float] = []
    ends: list[float] = []
    async with (
        instances(1, tmp, sections, prefix="check") as (inst,),
        aiohttp.ClientSession() as session,
    ):
        listed = await api(session, "GET", inst.url + "/connectors?limit=1000")
        if len(listed["data"]) != len(ids):
            result.problems.append(f"{len(listed['data'])} connectors listed, {len(ids)} made")
        pages = await asyncio.gather(
            *(api(session, "GET", inst.url + f"/connectors/{cid}/runs?limit=10") for cid in ids)
        )
    for cid, page in zip(ids, pages, strict=True):
        runs = page["data"]
        result.runs += len(runs)
        if len(runs) != 1:
            result.problems.append(f"connector {cid}: {len(runs)} runs")
            result.twice += len(runs) > 1
            result.lost += not runs
        for run in runs:
            result.by_owner[run["owner"]] = result.by_owner.get(run["owner"], 0) + 1
            result.pages += run["pages"] or 0
            wrong = run["outcome"] != "succeeded" or run["trigger"] != "manual"
            if wrong:
                result.problems.append(
                    f"connector {cid}: run {run['id']} {run['trigger']} {run['outcome']} "
                    f"{run['error'] or ''}".rstrip()
                )
            if run["pages"] != args.pages:
                wrong = True
                result.problems.append(f"connector {cid}: {run['pages']} pages, not {args.pages}")
            result.failed += wrong
            if (start := _ts(run["started_at"])) is not None:
                starts.append(start)
            if (end := _ts(run["finished_at"])) is not None:
                ends.append(end)
    result.wall = (max(ends) - t0) if ends else float("nan")
    slots = min(len(starts), result.instances * args.max_concurrent_runs)
    result.slots_busy = (sorted(starts)[slots - 1] - t0) if slots else float("nan")
    if len(starts) == len(ends) and starts:
        result.run_length = statistics.median(e - s for s, e in zip(starts, ends, strict=True))


# --- the report -----------------------------------------------------------------------------


def describe(r: Round, args: argparse.Namespace, unit: str) -> str:
    owners = " ".join(f"{v}" for _, v in sorted(r.by_owner.items()))
    cpu = r.cpu
    return (
        f"{r.instances} instance{'s' if r.instances > 1 else ' '}: wall {r.wall:6.2f} s, "
        f"{r.pages / r.wall:6.1f} pages/s, {r.store / max(r.runs, 1):6.1f} {unit}/run, "
        f"runs per instance {owners}, {r.queued} of {args.connectors} triggers queued; "
        f"every slot busy after {r.slots_busy:.2f} s, run length median {r.run_length:.2f} s; "
        f"CPU s: syncd {cpu['instances']:.1f}, postgres {cpu['postgres']:.1f}, "
        f"redis {cpu['redis']:.1f}, machine {cpu['machine']:.1f} of "
        f"{cpu['window'] * (os.cpu_count() or 1):.1f}; "
        f"load {r.load[0]:.2f} — {'ok' if not r.problems else 'FAILED'}"
    )


async def bench(args: argparse.Namespace) -> int:
    # SIGTERM (e.g. from timeout(1)) unwinds like Ctrl-C: every instance stopped, every round's
    # database and keys removed on the way out.
    task = asyncio.current_task()
    assert task is not None
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, task.cancel)
    counts = sorted({int(x) for x in args.instances.split(",") if x.strip()})
    statements = await statements_available(args.postgres_dsn)
    unit = "statements" if statements else "transactions"
    records = args.pages * args.page_size
    print(
        f"PostgreSQL {safe_dsn(args.postgres_dsn)}, Redis {args.redis_url}; "
        f"{args.connectors} connectors x {args.pages} pages of {args.page_size} records of "
        f"~{args.record_size} B, each page {args.delay * 1000:.0f} ms late; "
        f"max_concurrent_runs {args.max_concurrent_runs} per instance, tick "
        f"{args.tick_seconds:g} s, triggers via {args.trigger_via} instance"
        f"{'' if args.trigger_via == 'first' else 's'}"
    )
    print(
        f"store work counted in {unit}"
        + (
            ""
            if statements
            else " (pg_stat_statements is not loaded: pg_stat_database commits + rollbacks)"
        )
    )
    print(load_average())
    rounds: dict[int, list[Round]] = {n: [] for n in counts}
    failed = False
    seq = 0
    with SourceProcess(records, args.page_size, args.record_size, args.delay) as source:
        await wait_for_source(source.url)
        for k in range(1, args.rounds + 1):
            print(f"round {k}:")
            for n in counts:
                seq += 1
                r = await one_round(args, n, source.url, seq, statements)
                rounds[n].append(r)
                print("  " + describe(r, args, unit))
                for problem in r.problems[:10]:
                    print(f"    {problem}")
                if len(r.problems) > 10:
                    print(f"    ... {len(r.problems) - 10} more")
                failed = failed or bool(r.problems)

    ideal = args.connectors / args.max_concurrent_runs  # waves of runs on one instance
    print(
        f"medians of {args.rounds} round{'s' if args.rounds > 1 else ''} "
        f"(wall: first trigger -> last run finished; one run is at least "
        f"{args.pages * args.delay:.1f} s of source latency, {ideal:g} waves on one instance):"
    )
    print(
        f"  {'instances':>9} {'wall s':>7} {'pages/s':>8} {'speed-up':>8} {'run s':>6} "
        f"{unit + '/run':>17} {'syncd CPU ms/page':>17} {'runs':>5} {'ran twice':>9} "
        f"{'lost':>5} {'failed':>6}"
    )
    base = statistics.median(r.wall for r in rounds[counts[0]]) if counts else 0.0
    for n in counts:
        rs = rounds[n]
        wall = statistics.median(r.wall for r in rs)
        rate = statistics.median(r.pages / r.wall for r in rs)
        per_run = statistics.median(r.store / max(r.runs, 1) for r in rs)
        length = statistics.median(r.run_length for r in rs)
        cpu_page = statistics.median(1000 * r.cpu["instances"] / max(r.pages, 1) for r in rs)
        twice, lost, bad = (sum(getattr(r, k) for r in rs) for k in ("twice", "lost", "failed"))
        speed = f"{base / wall:.2f}x" if counts[0] == 1 else "-"
        print(
            f"  {n:>9} {wall:>7.2f} {rate:>8.1f} {speed:>8} {length:>6.2f} {per_run:>17.1f} "
            f"{cpu_page:>17.1f} {sum(r.runs for r in rs):>5} {twice:>9} {lost:>5} {bad:>6}"
        )
    print(
        f"every connector ran exactly once and succeeded, in every round: "
        f"{'yes' if not failed else 'NO'}"
    )
    print(load_average())
    return 1 if failed else 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--instances", default="1,2,4", help="instance counts, e.g. 1,2,4")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--connectors", type=int, default=64)
    parser.add_argument("--pages", type=int, default=10, help="pages per connector")
    parser.add_argument("--delay", type=float, default=0.2, help="seconds per page")
    parser.add_argument("--page-size", type=int, default=20, help="records per page")
    parser.add_argument("--record-size", type=int, default=1000, help="bytes per record")
    parser.add_argument("--max-concurrent-runs", type=int, default=8, help="per instance")
    parser.add_argument(
        "--tick-seconds",
        type=float,
        default=5.0,
        help="[scheduler] tick_seconds (queued triggers do not wait for a tick)",
    )
    parser.add_argument("--trigger-via", choices=("first", "spread"), default="first")
    parser.add_argument(
        "--settle",
        type=float,
        default=11.0,
        help="seconds before the first transaction count (PostgreSQL flushes an idle "
        "backend's counters within 10 s)",
    )
    parser.add_argument("--log-level", default="info", help="the instances' [log] level")
    parser.add_argument("--postgres-dsn", default="postgresql://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/0")
    args = parser.parse_args()
    try:
        code = asyncio.run(bench(args))
    except (KeyboardInterrupt, asyncio.CancelledError):
        print("interrupted", file=sys.stderr)
        code = 130
    sys.exit(code)


if __name__ == "__main__":
    main()
