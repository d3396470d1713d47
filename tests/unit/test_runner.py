"""run_service stops with a non-zero exit when a side task fails for good (a real daemon on
SQLite and the in-process queue)."""

from __future__ import annotations

import asyncio
import functools
from pathlib import Path
from typing import Any

import pytest

from syncd.daemon import Daemon, runner
from syncd.runtime.tasks import Supervisor
from tests.integration.conftest import embedded_config


@pytest.fixture(autouse=True)
def _keep_logging(monkeypatch: pytest.MonkeyPatch) -> None:
    # run_service configures process-wide logging; the test suite keeps its own.
    monkeypatch.setattr(runner, "configure_logging", lambda *args, **kwargs: None)


class RecordingDaemon(Daemon):
    made: list[RecordingDaemon] = []

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.stopped = False
        RecordingDaemon.made.append(self)

    async def stop(self, *args: Any, **kwargs: Any) -> None:
        self.stopped = True
        await super().stop(*args, **kwargs)


class FatalDaemon(RecordingDaemon):
    """Reports a side task that failed for good once it has started."""

    async def start(self) -> None:
        await super().start()
        assert self.fatal is not None
        asyncio.get_running_loop().call_soon(self.fatal.set_result, "scheduler")


async def test_a_fatal_daemon_task_stops_the_service_with_a_failure_exit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    RecordingDaemon.made.clear()
    monkeypatch.setattr(runner, "Daemon", FatalDaemon)
    code = await asyncio.wait_for(runner.run_service(embedded_config(tmp_path)), 10)
    assert code == runner.EXIT_FATAL != 0
    [daemon] = RecordingDaemon.made
    assert daemon.stopped


async def test_a_helper_failing_for_good_stops_the_service_with_a_failure_exit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    RecordingDaemon.made.clear()

    async def broken_status(daemon: Daemon) -> None:
        raise RuntimeError("status loop broken")

    monkeypatch.setattr(runner, "Daemon", RecordingDaemon)
    monkeypatch.setattr(runner, "_status_loop", broken_status)
    # No backoff: the restart budget is spent at once.
    monkeypatch.setattr(runner, "Supervisor", functools.partial(Supervisor, backoff=0.0))
    code = await asyncio.wait_for(runner.run_service(embedded_config(tmp_path)), 10)
    assert code == runner.EXIT_FATAL
    [daemon] = RecordingDaemon.made
    assert daemon.stopped
