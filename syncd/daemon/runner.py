"""Running the daemon as a service: signals, systemd notification, watchdog, reload.

- ``READY=1`` once the store is migrated, the queue answers and the API listens.
- ``STATUS=`` with running syncs and queue depth, refreshed every few seconds.
- ``WATCHDOG=1`` from an event-loop task at half of ``WATCHDOG_USEC``: a blocked loop stops
  the pings and systemd restarts the service.
- SIGTERM/SIGINT: ``STOPPING=1``, graceful stop (runs ``interrupted`` at their next page
  boundary, indexing given the grace period), exit 0. A second signal exits at once.
- A side task that failed for good (the daemon's, reported by the ``Daemon.fatal`` future,
  or the status/watchdog helpers here, which are supervised): logged, ``STOPPING=1``, graceful stop,
  exit ``EXIT_FATAL`` so that ``Restart=on-failure`` starts a fresh process.
- SIGHUP: re-read the configuration file; apply the log level and scheduler settings
  without dropping runs.
- The control API is served on a socket passed by systemd (``LISTEN_FDS``) when there is one.
- Once started, the garbage collector is tuned for a long-running process
  (:mod:`syncd.daemon.heap`).
"""

from __future__ import annotations

import asyncio
import os
import signal

import structlog

from syncd.config.loader import Config
from syncd.daemon import systemd
from syncd.daemon.core import Daemon
from syncd.daemon.heap import tune_collector
from syncd.errors import ConfigError, SyncdError
from syncd.observability.logs import configure_logging, describe_error, register_secret
from syncd.runtime.tasks import Supervisor

log = structlog.get_logger("syncd.daemon.runner")

EXIT_NOW = 130
#: A side task failed for good: not a clean stop, so that systemd restarts the service.
EXIT_FATAL = 1


def _register_secrets(config: Config) -> None:
    if config.api.token:
        register_secret(config.api.token)


async def _status_loop(daemon: Daemon) -> None:
    while True:
        try:
            depth = await daemon.queue_depth()
        except SyncdError:
            depth = -1
        running = len(daemon.running_syncs)
        systemd.notify(f"STATUS=running syncs: {running}, queued documents: {depth}")
        await asyncio.sleep(5.0)


def _reload(daemon: Daemon) -> None:
    path = daemon.config.path
    try:
        fresh = Config.load(path)
    except ConfigError as exc:
        log.error("runner.reload_failed", error=str(exc))
        return
    # Logged before the new level applies, so that lowering the level still records it.
    log.info(
        "runner.reloaded",
        path=str(path) if path else None,
        log_level=fresh.log.level,
        tick_seconds=fresh.scheduler.tick_seconds,
        stale_lock_seconds=fresh.scheduler.stale_lock_seconds,
    )
    configure_logging(fresh.log.level, fresh.log.format)
    _register_secrets(fresh)
    daemon.apply_settings(fresh)


async def run_service(config: Config) -> int:
    """Run until SIGTERM/SIGINT (exit 0) or a side task fails for good (``EXIT_FATAL``)."""
    configure_logging(config.log.level, config.log.format)
    _register_secrets(config)
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    signals_seen = 0

    def on_stop_signal() -> None:
        nonlocal signals_seen
        signals_seen += 1
        if signals_seen > 1:
            log.warning("runner.exit_now")
            os._exit(EXIT_NOW)
        systemd.notify("STOPPING=1")
        stop.set()

    sockets = systemd.listen_sockets()
    daemon = Daemon(config, api_sockets=sockets)
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, on_stop_signal)
    try:
        await daemon.start()
    except ConfigError:
        raise  # the CLI exits 2 (e.g. a backend's driver not installed): not restarted
    except (SyncdError, OSError) as exc:
        log.error("runner.start_failed", error=str(exc))
        return 1
    loop.add_signal_handler(signal.SIGHUP, _reload, daemon)
    # Everything built so far lives as long as the process: frozen out of the collections,
    # which then stop the loop far less often and for less long (see syncd.daemon.heap).
    tune_collector()
    failures: list[str] = []

    def on_fatal(name: str, exc: BaseException) -> None:
        fail(f"{name}: {describe_error(exc, plain=())}")

    def fail(reason: str) -> None:
        failures.append(reason)
        if not stop.is_set():
            systemd.notify("STOPPING=1", f"STATUS=failed: {reason}")
            stop.set()

    def on_daemon_fatal(fatal: asyncio.Future[str]) -> None:
        # A callback, not a task awaiting the future: cancelling a waiter would cancel it.
        if not fatal.cancelled():
            fail(f"{fatal.result()} (daemon task)")

    helpers = Supervisor(on_fatal)
    helpers.spawn("sd-status", lambda: _status_loop(daemon))
    interval = systemd.watchdog_interval()
    if interval:
        helpers.spawn("sd-watchdog", lambda: systemd.watchdog_loop(interval))
    fatal = daemon.fatal
    if fatal is not None:
        fatal.add_done_callback(on_daemon_fatal)
    systemd.notify("READY=1", f"STATUS=listening on {daemon.api_address}")
    try:
        await stop.wait()
        if failures:
            log.error("runner.fatal", failures=failures)
        else:
            log.info("runner.stopping")
    finally:
        if fatal is not None:
            fatal.remove_done_callback(on_daemon_fatal)
        await helpers.stop()
        loop.remove_signal_handler(signal.SIGHUP)
        await daemon.stop()
    return EXIT_FATAL if failures else 0
