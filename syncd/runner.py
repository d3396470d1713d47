"""Running the daemon as a service: signals, systemd notification, watchdog, reload.

- ``READY=1`` once the store is migrated, the queue answers and the API listens.
- ``STATUS=`` with running syncs and queue depth, refreshed every few seconds.
- ``WATCHDOG=1`` from an event-loop task at half of ``WATCHDOG_USEC``: a blocked loop stops
  the pings and systemd restarts the service.
- SIGTERM/SIGINT: ``STOPPING=1``, graceful stop (runs ``interrupted`` at their next page
  boundary, indexing given the grace period), exit 0. A second signal exits at once.
- SIGHUP: re-read the configuration file; apply the log level and scheduler settings
  without dropping runs.
- The control API is served on a socket passed by systemd (``LISTEN_FDS``) when there is one.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal

import structlog

from syncd import systemd
from syncd.config import Config
from syncd.daemon import Daemon
from syncd.errors import ConfigError, SyncdError
from syncd.logs import configure_logging, register_secret

log = structlog.get_logger("syncd.runner")

EXIT_NOW = 130


def _register_secrets(config: Config) -> None:
    if config.api.token:
        register_secret(config.api.token)


async def _status_loop(daemon: Daemon) -> None:
    while True:
        try:
            depth = sum((await daemon.queue.depth()).values())
        except SyncdError:
            depth = -1
        running = len(daemon.engine.running)
        systemd.notify(f"STATUS=running syncs: {running}, queued documents: {depth}")
        await asyncio.sleep(5.0)


def _reload(daemon: Daemon) -> None:
    path = daemon.config.path
    try:
        fresh = Config.load(path)
    except ConfigError as exc:
        log.error("reload failed; keeping the running configuration", error=str(exc))
        return
    # Logged before the new level applies, so that lowering the level still records it.
    log.info(
        "configuration reloaded",
        path=str(path) if path else None,
        log_level=fresh.log.level,
        tick_seconds=fresh.scheduler.tick_seconds,
        stale_lock_seconds=fresh.scheduler.stale_lock_seconds,
    )
    configure_logging(fresh.log.level, fresh.log.format)
    _register_secrets(fresh)
    daemon.scheduler.tick_seconds = fresh.scheduler.tick_seconds
    daemon.scheduler.stale_lock_seconds = fresh.scheduler.stale_lock_seconds


async def run_service(config: Config) -> int:
    """Run until SIGTERM/SIGINT; returns the exit code."""
    configure_logging(config.log.level, config.log.format)
    _register_secrets(config)
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    signals_seen = 0

    def on_stop_signal() -> None:
        nonlocal signals_seen
        signals_seen += 1
        if signals_seen > 1:
            log.warning("second stop signal: exiting now")
            os._exit(EXIT_NOW)
        systemd.notify("STOPPING=1")
        stop.set()

    sockets = systemd.listen_sockets()
    daemon = Daemon(config, api_sockets=sockets)
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, on_stop_signal)
    try:
        await daemon.start()
    except (SyncdError, OSError) as exc:
        log.error("syncd could not start", error=str(exc))
        return 1
    loop.add_signal_handler(signal.SIGHUP, _reload, daemon)
    helpers: list[asyncio.Task[None]] = [
        asyncio.create_task(_status_loop(daemon), name="sd-status")
    ]
    interval = systemd.watchdog_interval()
    if interval:
        helpers.append(asyncio.create_task(systemd.watchdog_loop(interval), name="sd-watchdog"))
    systemd.notify("READY=1", f"STATUS=listening on {daemon.api_address}")
    try:
        await stop.wait()
        log.info("stopping")
    finally:
        for task in helpers:
            task.cancel()
        for task in helpers:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        loop.remove_signal_handler(signal.SIGHUP)
        await daemon.stop()
    return 0
