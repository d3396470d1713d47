"""The scheduler's bulk claim (``Store.claim_due``), the part both backends share: applying
the pure rule to each row read under lock, in Python, and checking that it changed nothing
but what the claim writes (:data:`~syncd.store.codec.CLAIM_COLUMNS`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields

from syncd.models import Connector, RunEnd, RunStart, Transition
from syncd.rules import NotDue
from syncd.store.base import StateRule

# The Connector fields behind CLAIM_COLUMNS (progress and waiting are two columns each).
_CLAIM_FIELDS = (
    "sync_status",
    "run_id",
    "sync_started_at",
    "sync_owner",
    "sync_heartbeat_at",
    "progress",
    "waiting",
    "next_run_at",
    "sync_queued_at",
    "updated_at",
    "failures",
    "retry_at",
)


# Every other field must come back unchanged (the rules keep the very same objects).
_KEPT_FIELDS = tuple(f.name for f in fields(Connector) if f.name not in _CLAIM_FIELDS)


@dataclass(frozen=True)
class ClaimPlan:
    """What one claim transaction writes: ``results`` are ``(before, after)`` for every row
    read, in order (``after is before`` when the rule raised :class:`NotDue`: nothing
    written); ``written`` the connectors to update, with the run rows to insert and end."""

    results: list[tuple[Connector, Connector]]
    written: list[Connector]
    starts: list[RunStart]
    ends: list[RunEnd]


def plan_claims(rows: Sequence[Connector], rule: StateRule) -> ClaimPlan:
    """Apply ``rule`` to each connector; ``ValueError`` if it touches anything but the
    run, the schedule and the queued trigger."""
    plan = ClaimPlan([], [], [], [])
    for before in rows:
        try:
            transition: Transition = rule(before)
        except NotDue:
            plan.results.append((before, before))
            continue
        after = transition.connector
        for name in _KEPT_FIELDS:
            old, new = getattr(before, name), getattr(after, name)
            if new is not old and new != old:
                raise ValueError(f"a claim changes only the run and the schedule, not {name}")
        plan.results.append((before, after))
        plan.written.append(after)
        if transition.start is not None:
            plan.starts.append(transition.start)
        plan.ends.extend(transition.ends)
    return plan
