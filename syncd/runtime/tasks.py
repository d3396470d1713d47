"""Owned background tasks: one way to stop a task, and one owner for long-running side tasks.

:func:`cancel_and_wait` is how any task of ours is stopped: cancel it, wait for it, and
never swallow a cancellation aimed at the caller (STYLE.md, "what to avoid").

:class:`Supervisor` owns named side tasks that should run until stopped (scheduler loop,
lease sweeper, control-message listener, metrics refresh, queue rebuild, watchdog …). A task
that dies — raises, or returns when it should run forever — is restarted with exponential
backoff; one that must not be restarted, or that dies too often, is reported to ``on_fatal``
so that the process stops instead of running half-blind.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

import structlog

from syncd.observability.logs import describe_error

log = structlog.get_logger("syncd.runtime.tasks")

TaskFactory = Callable[[], Coroutine[Any, Any, None]]
OnFatal = Callable[[str, BaseException], None]


class TaskReturned(RuntimeError):
    """A supervised task returned although it should run until stopped."""


def _report_outcome(task: asyncio.Task[Any]) -> None:
    """Log a stopped task's exception, if it ended with one (cancelled or returned: nothing)."""
    if task.cancelled():
        return
    exc = task.exception()
    if exc is not None:
        log.error(
            "task.failed", task=task.get_name(), error=describe_error(exc, plain=()), exc_info=exc
        )


async def cancel_and_wait(task: asyncio.Task[Any], *, timeout: float | None = None) -> None:
    """Cancel ``task`` and wait until it has finished.

    - The task's own ``CancelledError`` (or a normal return) is what was asked for: absorbed.
    - Any other exception of the task is logged ("task failed", with the traceback), not
      raised: stopping goes on. A caller that needs the outcome reads ``task.exception()``.
    - A cancellation of the *caller* while it waits propagates at once: the wait is
      ``asyncio.wait``, which never forwards the caller's cancellation to ``task`` nor lets
      ``task``'s outcome stand in for it (awaiting the task directly would: a task that
      ignores its cancellation would then swallow the caller's). ``task`` was cancelled and
      finishes on its own; its outcome is logged when it comes.
    - ``timeout`` bounds the wait for a task that ignores or delays its cancellation: it is
      then left running (already cancelled), with a warning; its outcome is logged later.

    A task already finished is not waited for (no suspension point); its exception is logged.
    """
    if task is asyncio.current_task():
        raise RuntimeError("a task cannot cancel and wait for itself")
    if task.done():
        _report_outcome(task)
        return
    task.cancel()
    try:
        done, _ = await asyncio.wait({task}, timeout=timeout)
    except asyncio.CancelledError:
        task.add_done_callback(_report_outcome)
        raise
    if not done:
        log.warning("task.not_stopped", task=task.get_name(), timeout=timeout)
        task.add_done_callback(_report_outcome)
        return
    _report_outcome(task)


@dataclass(eq=False)
class _Child:
    name: str
    factory: TaskFactory
    restart: bool
    delay: float
    task: asyncio.Task[None] | None = None
    # Why it is not running now ("restarting: …", "failed: …"); None while it runs.
    problem: str | None = None
    backing_off: bool = False
    # Set by finish(): the task was asked to end, so its end is not a death.
    finishing: bool = False
    deaths: deque[float] = field(default_factory=deque)


class Supervisor:
    """Owns named side tasks; restarts those that die, reports those that cannot go on.

    Policy (all injectable, defaults in brackets):

    - A task that raises, or returns, has died. It is restarted after ``backoff`` [0.1 s],
      doubling on each death up to ``max_backoff`` [30 s]; a run that lasted at least
      ``healthy_after`` [60 s] resets the backoff and forgets earlier deaths.
    - A task spawned with ``restart=False``, or dying more than ``max_restarts`` [5] times
      within ``restart_window`` [60 s], is fatal: it stays down and ``on_fatal(name, exc)``
      is called once (the daemon then stops with a non-zero exit). The supervisor does not
      stop the other tasks itself: the owner decides, and stops everything with :meth:`stop`.
    - A ``CancelledError`` aimed at the task (its ``cancelling()`` count) always ends it;
      one raised *inside* it without it being cancelled (an awaited future was cancelled by
      someone else) is a death like any other.

    ``clock`` (monotonic seconds) and ``sleep`` are injectable for tests. Tasks are created
    by :meth:`spawn` on the running loop; nothing is bound to a loop at construction.
    """

    def __init__(
        self,
        on_fatal: OnFatal,
        *,
        backoff: float = 0.1,
        max_backoff: float = 30.0,
        healthy_after: float = 60.0,
        max_restarts: int = 5,
        restart_window: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[object]] = asyncio.sleep,
    ) -> None:
        self._on_fatal = on_fatal
        self._backoff = backoff
        self._max_backoff = max_backoff
        self._healthy_after = healthy_after
        self._max_restarts = max_restarts
        self._restart_window = restart_window
        self._clock = clock
        self._sleep = sleep
        self._children: dict[str, _Child] = {}
        self._stopped = False

    def spawn(self, name: str, factory: TaskFactory, *, restart: bool = True) -> None:
        """Start ``factory()`` as the task ``name``, to run until :meth:`stop`.

        ``factory`` is called again for each restart, so it must build a fresh coroutine
        (``lambda: self._loop()``, not an already-created coroutine).
        """
        if self._stopped:
            raise RuntimeError("supervisor stopped")
        if name in self._children:
            raise ValueError(f"a task named {name!r} is already supervised")
        child = _Child(name, factory, restart, self._backoff)
        self._children[name] = child
        child.task = asyncio.create_task(self._watch(child), name=name)
        child.task.add_done_callback(self._watch_ended)

    @property
    def names(self) -> frozenset[str]:
        """The supervised tasks, running or not."""
        return frozenset(self._children)

    def problems(self) -> dict[str, str]:
        """Tasks not running now, and why: ``{"scheduler": "restarting: OSError: …"}``.

        ``restarting: …`` while a task waits for its restart, ``failed: …`` once it was
        given up (fatal). Empty when every task runs: what ``/readyz`` reports.
        """
        return {c.name: c.problem for c in self._children.values() if c.problem is not None}

    async def finish(self, name: str, timeout: float | None = None) -> None:
        """Let ``name`` end on its own (its owner asked it to, e.g. ``Scheduler.stop()``)
        within ``timeout`` seconds, then cancel it. Its return is not a death."""
        child = self._children.get(name)
        if child is None or child.task is None:
            return
        child.finishing = True
        if not child.backing_off:
            await asyncio.wait({child.task}, timeout=timeout)
        await cancel_and_wait(child.task)
        # Only now: a caller cancelled above leaves the task owned, for stop() to end.
        self._children.pop(name, None)

    async def stop(self, timeout: float | None = None) -> None:
        """Cancel every task and wait for them (each bounded by ``timeout``, see
        :func:`cancel_and_wait`). No task is spawned or restarted afterwards."""
        self._stopped = True
        tasks = [c.task for c in self._children.values() if c.task is not None]
        self._children.clear()
        await asyncio.gather(*(cancel_and_wait(t, timeout=timeout) for t in tasks))

    # --- one task's life --------------------------------------------------------------

    async def _watch(self, child: _Child) -> None:
        while True:
            started = self._clock()
            error: BaseException
            try:
                await child.factory()
            except asyncio.CancelledError as exc:
                me = asyncio.current_task()
                if me is None or me.cancelling():
                    raise  # aimed at this task: stop() or finish()
                error = exc
            except Exception as exc:
                error = exc
            else:
                error = TaskReturned("returned; it should run until stopped")
            if child.finishing:
                if not isinstance(error, TaskReturned):
                    log.warning(
                        "task.failed_finishing",
                        task=child.name,
                        error=describe_error(error, plain=()),
                    )
                return
            delay = self._next_delay(child, ran=self._clock() - started)
            if delay is None:
                self._give_up(child, error)
                return
            text = describe_error(error, plain=())
            child.problem = f"restarting: {text}"
            log.error(
                "task.died",
                task=child.name,
                error=text,
                next_attempt_in=delay,
                exc_info=error,
            )
            child.backing_off = True
            try:
                await self._sleep(delay)
            finally:
                child.backing_off = False
            if child.finishing:
                return
            child.problem = None
            log.info("task.restarted", task=child.name)

    def _next_delay(self, child: _Child, *, ran: float) -> float | None:
        """The wait before the restart that follows a death, or None: give up."""
        if not child.restart:
            return None
        now = self._clock()
        if ran >= self._healthy_after:
            child.delay = self._backoff
            child.deaths.clear()
        child.deaths.append(now)
        while child.deaths and child.deaths[0] < now - self._restart_window:
            child.deaths.popleft()
        if len(child.deaths) > self._max_restarts:
            return None
        delay = child.delay
        child.delay = min(delay * 2, self._max_backoff)
        return delay

    def _give_up(self, child: _Child, error: BaseException) -> None:
        text = describe_error(error, plain=())
        child.problem = f"failed: {text}"
        log.critical(
            "task.fatal",
            task=child.name,
            error=text,
            restart=child.restart,
            deaths=len(child.deaths),
            exc_info=error,
        )
        try:
            self._on_fatal(child.name, error)
        except Exception:
            log.exception("task.on_fatal_failed", task=child.name)

    def _watch_ended(self, task: asyncio.Task[None]) -> None:
        # _watch only ends by cancellation or after _give_up; anything else is a bug here.
        if not task.cancelled() and task.exception() is not None:
            log.error("task.supervisor_bug", task=task.get_name(), exc_info=task.exception())
