"""Admission control (``[sync] max_concurrent_runs``): the run slots of this instance.

At most ``max_runs`` runs execute here at a time, counting the slots reserved for claims in
flight. :meth:`Admission.claim_and_start` is the one way a run starts, for a manual trigger
(the service) as for a scheduler tick: it reserves the slots synchronously, before the claim
is awaited, so that concurrent triggers and ticks never overcommit; it starts a run for each
connector the claim took (also when the claim fails or is cancelled halfway: a claimed run
never stays without its task); and it gives back the slots left over. A slot frees when its
run's task ends.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from syncd.models import Connector, RunTrigger
from syncd.pipeline.engine import SyncEngine

Claimed = tuple[Connector, RunTrigger]
"""A connector as its claim left it (``run_id`` set) and what started the run."""

Claim = Callable[[int, list[Claimed]], Awaitable[None]]
"""``claim(slots, claimed)``: claim at most ``slots`` connectors in the store, appending each
to ``claimed`` as soon as its claim is committed."""


class Admission:
    """The run slots of this instance and the start of the runs claimed in them."""

    def __init__(
        self,
        engine: SyncEngine,
        *,
        max_runs: int = 32,
        on_slot_free: Callable[[], None] | None = None,
    ) -> None:
        self._engine = engine
        #: Runs at most (a reload may change it: more slots are filled at the next tick,
        #: fewer let running runs finish).
        self.max_runs = max_runs
        self._on_slot_free = on_slot_free
        self._reserved = 0
        self._running = 0

    @property
    def free_slots(self) -> int:
        """Run slots neither running nor reserved."""
        return max(0, self.max_runs - self._reserved - self._running)

    async def claim_and_start(
        self, claim: Claim, *, wanted: int = 1, notify: bool = True
    ) -> list[Claimed] | None:
        """Reserve up to ``wanted`` free slots, ``claim`` that many connectors at most, and
        start a run for each in its slot; the runs started, or ``None`` when no slot was free
        (nothing was claimed).

        The slots the claim did not use are given back; that frees them for whoever waits
        (``on_slot_free``) unless ``notify`` is false: the scheduler's own reservations, which
        must not wake it again.
        """
        # Synchronous up to the claim: no other task runs between the check and the
        # reservation.
        reserved = min(wanted, self.free_slots)
        if reserved <= 0:
            return None
        self._reserved += reserved
        claimed: list[Claimed] = []
        try:
            await claim(reserved, claimed)
        finally:
            # Every claimed run is started, even when the claim was cancelled after some
            # commits: none stays claimed without its task.
            for connector, trigger in claimed:
                self._reserved -= 1
                self._running += 1
                self._engine.start(connector, trigger, on_end=self._run_ended)
            unused = reserved - len(claimed)
            self._reserved -= unused
            if unused and notify:
                self._slot_freed()
        return claimed

    def _run_ended(self) -> None:
        self._running -= 1
        self._slot_freed()

    def _slot_freed(self) -> None:
        if self._on_slot_free is not None:
            self._on_slot_free()
