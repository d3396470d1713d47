"""A test hook the fixture servers share: scripted failures, standing for an outage of the
real API (no part of any API's contract). A server armed with :meth:`Faults.arm` answers the
requests it picks with an error status, in that API's own error shape, and serves every
other request as documented."""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["Faults"]


@dataclass
class _Fault:
    status: int
    after: int  # requests still let through before this fault starts
    times: int  # requests still to fail


@dataclass
class Faults:
    """Failures to come, in the order armed; :meth:`take` is asked once per request."""

    _queue: list[_Fault] = field(default_factory=list)

    def arm(self, status: int = 500, times: int = 1, *, after: int = 0) -> None:
        """Fail ``times`` requests with ``status``, after letting the next ``after`` through
        (counted from the end of the failures armed before)."""
        if not 400 <= status <= 599 or times < 1 or after < 0:
            raise ValueError("a fault is a 4xx/5xx status, at least once, after >= 0 requests")
        self._queue.append(_Fault(status, after, times))

    def take(self) -> int | None:
        """The status to answer this request with, or ``None`` to serve it."""
        if not self._queue:
            return None
        fault = self._queue[0]
        if fault.after > 0:
            fault.after -= 1
            return None
        fault.times -= 1
        if fault.times == 0:
            self._queue.pop(0)
        return fault.status
