"""The OpenAPI description against the server, by a schema-driven fuzzer (schemathesis).

One real daemon (SQLite + in-process queue, API on 127.0.0.1 with a token) and a real local
source server. Schemathesis loads ``/openapi.json`` and runs every phase (examples, coverage,
fuzzing, and the stateful phase that follows the description's links) with every check:
the description must be exactly as strict as the server (what it calls valid is accepted,
what it calls invalid is refused), every status and body must be documented, and a
deleted connector must be gone. Zero failures are allowed, and every operation that takes a
connector id must have been called with a real one (counted at the server, in the daemon's
request metrics).

Network: the fuzzer writes connector bodies whose URLs the daemon then requests (syncs,
previews, webhooks, OAuth2 token URLs). Two things keep that traffic on this machine:

- every URL the server would accept is rewritten, just before the request is sent, to the
  local source server (so syncs have something real to crawl); the rewrite keeps the body
  exactly as valid as it was;
- whatever slips through (a ``${env:}`` reference resolved at request time, a redirect) is
  refused by :func:`loopback_only`, an audit hook that fails any name lookup, connect or
  datagram to a host that is not loopback, in every thread of this process, before a packet
  leaves it.

Examples are bounded (``MAX_EXAMPLES`` per operation and phase, deterministic generation):
the whole run takes about a minute on two cores.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import ipaddress
import re
import socket
import sys
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis.engine import events

from syncd.config import Config
from syncd.daemon import Daemon
from syncd.models import DocStatus
from syncd.schema import url_problem
from syncd.schema.patterns import CRON_PATTERN, URL_PATTERN
from tests.api.conftest import Api, StartDaemon
from tests.integration.conftest import http_source
from tests.integration.sourceserver import SourceServer

TOKEN = "fuzz-token-0123456789"
MAX_EXAMPLES = 25
SEED = 20240601
STATEFUL_STEPS = 12
# Operations whose answer is an endless stream (Server-Sent Events): a request/response
# fuzzer waits on them until its timeout. Tested in their own module.
STREAMS = frozenset({"events"})

pytestmark = pytest.mark.timeout(600)  # minutes on a loaded two-core machine


# --- loopback only ----------------------------------------------------------------------


@dataclass
class _Guard:
    active: bool = False
    refused: list[tuple[str, str]] = field(default_factory=list)


_GUARD = _Guard()
_HOOKED = False


def _is_loopback(host: Any) -> bool:
    if isinstance(host, bytes):
        host = host.decode("ascii", "replace")
    if host is None or host == "localhost":
        return True
    try:
        return ipaddress.ip_address(str(host).split("%", 1)[0]).is_loopback
    except ValueError:
        return False


def _audit(event: str, args: tuple[Any, ...]) -> None:
    if not _GUARD.active:
        return
    if event in ("socket.getaddrinfo", "socket.gethostbyname", "socket.gethostbyname_ex"):
        if not _is_loopback(args[0]):
            _GUARD.refused.append((event, repr(args[0])))
            raise socket.gaierror(socket.EAI_NONAME, "refused by the test: not a loopback host")
    elif event in ("socket.connect", "socket.sendto", "socket.sendmsg"):
        sock, address = args[0], args[-1]
        inet = getattr(sock, "family", None) in (socket.AF_INET, socket.AF_INET6)
        if inet and isinstance(address, tuple) and not _is_loopback(address[0]):
            _GUARD.refused.append((event, repr(address)))
            raise ConnectionRefusedError(111, "refused by the test: not a loopback address")


@contextlib.contextmanager
def loopback_only() -> Iterator[list[tuple[str, str]]]:
    """Refuse, in this whole process, any lookup or connection to a non-loopback host;
    yields the list of what was refused.

    An audit hook cannot be removed: it is installed once and does nothing outside this
    context.
    """
    global _HOOKED
    if not _HOOKED:
        sys.addaudithook(_audit)
        _HOOKED = True
    _GUARD.refused = []
    _GUARD.active = True
    try:
        yield _GUARD.refused
    finally:
        _GUARD.active = False


def test_loopback_only_refuses_other_hosts() -> None:
    with loopback_only() as refused:
        with pytest.raises(OSError):
            socket.getaddrinfo("example.com", 80)
        probe = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            with pytest.raises(ConnectionRefusedError):
                probe.connect(("192.0.2.1", 80))  # TEST-NET-1: refused before any packet
        finally:
            probe.close()
        assert socket.getaddrinfo("127.0.0.1", 80)
    assert [event for event, _ in refused] == ["socket.getaddrinfo", "socket.connect"]


# --- the daemon -------------------------------------------------------------------------


@contextlib.asynccontextmanager
async def _daemon(tmp_path: Path) -> AsyncIterator[Daemon]:
    config = Config.from_mapping(
        {
            "store": {"url": f"sqlite:///{tmp_path / 'fuzz.db'}"},
            "queue": {"url": "memory://"},
            "api": {"listen": "127.0.0.1:0", "token": TOKEN},
            "scheduler": {"tick_seconds": 3600},
            "http": {"timeout_read": 2, "timeout_connect": 1},
            "workers": {"concurrency": 2, "index_timeout_seconds": 2},
            "daemon": {"grace_seconds": 0.2},
        },
        environ={},
    )
    async with Daemon(config) as daemon:
        yield daemon


# Waits a generated body may ask for, capped (a smaller valid value is as valid): a preview
# waits for them, up to its own time limit.
_CAPS = {
    "page_retry_backoff": 0.05,
    "throttle_seconds": 0.05,
    "timeout_seconds": 2,
    "read": 1,
    "connect": 1,
}


def _to_source(value: Any, target: str) -> Any:
    """``value`` with every URL the server accepts replaced by ``target``, and every wait
    capped (:data:`_CAPS`): exactly as valid as it was."""
    if isinstance(value, dict):
        out = {}
        for key, item in value.items():
            if key in ("url", "token_url") and isinstance(item, str) and not url_problem(item):
                item = target
            elif key in _CAPS and _number(item) and _CAPS[key] < item:
                item = _CAPS[key]
            out[key] = _to_source(item, target)
        return out
    if isinstance(value, list):
        return [_to_source(item, target) for item in value]
    return value


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


SEEDS = 5
"""Connectors with indexed documents made before the fuzzer starts."""


async def _seed(daemon: Daemon, source: SourceServer) -> None:
    """Connectors with indexed documents, first in the list (ids sort by creation): the
    stateful phase reaches their documents through the links (list → documents → one
    document). Several, because the same phase also deletes the first connector it lists:
    with one seed, a sequence that deleted it before following the document link left the
    document route unreached (seen once in several full runs). Their source is incremental:
    the crawl state's routes answer 422 for a connector without a mark."""
    incremental = {"field": "updated_at", "param": "updated_since"}
    for i in range(SEEDS):
        body = {"name": f"seed-{i}", "source": http_source(source, incremental=incremental)}
        c = await daemon.create_connector(body)
        await daemon.trigger_sync(c.id)
        await daemon.wait_documents(c.id, lambda counts: counts[DocStatus.INDEXED] == 25)


# --- the run ----------------------------------------------------------------------------


@dataclass
class FuzzResult:
    failures: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    checks: Counter[str] = field(default_factory=Counter)
    phases: Counter[str] = field(default_factory=Counter)
    stop_reason: str = ""
    slowest: list[tuple[float, str]] = field(default_factory=list)


def _fuzz(api: str, source_url: str, settle_delete: Callable[[str], None]) -> FuzzResult:
    """Run every phase with every check against ``api`` (blocking: run it in a thread).

    ``settle_delete(id)`` returns once the delete cascade of a connector whose ``DELETE``
    answered 202 has completed. The API promises exactly this: a 202 means the connector
    reads ``deleting`` (``GET`` 200, writes 409 ``Connector is being deleted``) until its
    cascade completes in the background, and 404 on every route from then on. The stateful
    checks (``use_after_free``) test the "from then on": each sequence goes on after the
    cascade, never racing it, so a load that slows the cascade cannot fail the run, and a
    connector still answering after its cascade does.
    """
    config = schemathesis.Config.from_dict(
        {
            "seed": SEED,
            "workers": 1,
            "continue-on-failure": True,
            "headers": {"Authorization": f"Bearer {TOKEN}"},
            "request-timeout": 20,
            "max-stream-events": 1,
            "checks": {"enabled": True},
            "generation": {"max-examples": MAX_EXAMPLES, "deterministic": True},
            "phases": {"stateful": {"max-steps": STATEFUL_STEPS}},
            "warnings": False,
            "operations": [
                {
                    # The preview names its connector in the body: a DELETE of that connector
                    # earlier in a sequence is not seen by this check (the 404 is right).
                    "include-operation-id": "preview_connector",
                    "checks": {"ensure_resource_availability": {"enabled": False}},
                },
                {
                    # A crawl mode or a mark is checked against the connector's source (has
                    # it `incremental`, can its format read the value, is `since` before
                    # `until`: DESIGN.md §12): no schema knows which connector is which, so
                    # a body the schema calls valid may be refused, with a 422 naming it.
                    "include-operation-id-regex": "^(trigger_sync|set_state|reset_state)$",
                    "checks": {
                        "positive_data_acceptance": {
                            "expected-statuses": [
                                *("2xx", "3xx", "401", "403", "404", "409", "422", "429"),
                                "5xx",
                            ]
                        }
                    },
                },
                {
                    # `DELETE /connectors/{id}/state` resets the crawl state, which `GET` still
                    # answers (no mark, the next crawl full): not a resource deleted. (A
                    # deleted connector's state is a 404, as every route's: test_routes.)
                    "include-operation-id": "get_state",
                    "checks": {"use_after_free": {"enabled": False}},
                },
            ],
        }
    )

    def before_call(context: Any, case: Any, kwargs: dict[str, Any]) -> None:
        if isinstance(case.body, dict):
            case.body = _to_source(case.body, source_url)
            if case.operation.path == "/connectors/preview":
                # Its default limit is 10 s, spent in full on a failing source.
                case.body.setdefault("timeout_seconds", _CAPS["timeout_seconds"])

    def after_call(context: Any, case: Any, response: Any) -> None:
        if (
            case.operation.method.upper() == "DELETE"
            and case.operation.path == "/connectors/{id}"
            and response.status_code == 202
        ):
            settle_delete(str(case.path_parameters["id"]))

    schemathesis.hook(before_call)
    schemathesis.hook(after_call)
    try:
        schema = schemathesis.openapi.from_url(
            f"{api}/openapi.json", config=config, headers={"Authorization": f"Bearer {TOKEN}"}
        )
        schema = schema.exclude(operation_id=list(STREAMS))
        return _collect(schemathesis.engine.from_schema(schema).execute())
    finally:
        schemathesis.hooks.GLOBAL_HOOK_DISPATCHER.unregister(before_call)
        schemathesis.hooks.GLOBAL_HOOK_DISPATCHER.unregister(after_call)


def _collect(stream: Any) -> FuzzResult:
    result = FuzzResult()
    for event in stream:
        if isinstance(event, events.ScenarioFinished):
            result.phases[event.phase.value] += 1
            for interaction in event.recorder.interactions.values():
                if interaction.response is not None:
                    request = interaction.request
                    result.slowest.append(
                        (interaction.response.elapsed, f"{request.method} {request.uri}")
                    )
            for case_id, nodes in event.recorder.checks.items():
                for node in nodes:
                    result.checks[node.name] += 1
                    if node.failure_info is not None:
                        failure = node.failure_info.failure
                        result.failures.append(
                            f"[{event.phase.value}] {event.recorder.label} {node.name}: "
                            f"{failure.title}\n{failure.message}\n{node.failure_info.code_sample}"
                            f"\n{_answer(event.recorder, case_id)}"
                        )
        elif isinstance(event, events.NonFatalError):
            result.errors.append(f"{event.label}: {event.info.format()}")
        elif isinstance(event, events.FatalError):
            result.errors.append(f"fatal: {event.exception!r}")
        elif isinstance(event, events.EngineFinished):
            result.stop_reason = event.stop_reason.value
            result.failures.extend(f"[after run] {f.title}\n{f.message}" for f in event.failures)
    return result


def _answer(recorder: Any, case_id: str) -> str:
    interaction = recorder.interactions.get(case_id)
    response = interaction.response if interaction is not None else None
    if response is None:
        return "(no response)"
    return f"-> {response.status_code} {response.content[:500]!r}"


def _served(daemon: Daemon) -> dict[tuple[str, str], set[int]]:
    """``(METHOD, route pattern) → statuses answered``, from the daemon's request metrics."""
    served: dict[tuple[str, str], set[int]] = {}
    for metric in daemon.metrics.registry.collect():
        if metric.name != "syncd_api_request_seconds":
            continue
        for sample in metric.samples:
            if sample.name.endswith("_count") and sample.value > 0:
                key = (sample.labels["method"], sample.labels["route"])
                served.setdefault(key, set()).add(int(sample.labels["code"]))
    return served


async def test_fuzzer_finds_no_disagreement(tmp_path: Path) -> None:
    from syncd.api.openapi import openapi_path
    from syncd.api.routes import ROUTES

    started = time.monotonic()
    with loopback_only() as refused:
        async with SourceServer(25, page_size=10) as source, _daemon(tmp_path) as daemon:
            assert daemon.api_address is not None
            await _seed(daemon, source)
            loop = asyncio.get_running_loop()

            def settle_delete(connector_id: str) -> None:
                cascade = daemon.wait_deleted(connector_id)
                asyncio.run_coroutine_threadsafe(cascade, loop).result(timeout=60)

            result = await asyncio.to_thread(
                _fuzz, daemon.api_address, source.items_url, settle_delete
            )
            served = _served(daemon)
    elapsed = time.monotonic() - started
    print(
        f"fuzz: {elapsed:.1f} s, stop {result.stop_reason}, scenarios {dict(result.phases)}, "
        f"checks {dict(result.checks)}, refused {len(refused)} non-loopback attempts, "
        f"slowest {sorted(result.slowest, reverse=True)[:5]}"
    )

    assert not result.errors, "\n\n".join(result.errors)
    assert not result.failures, f"{len(result.failures)} failures:\n\n" + "\n\n".join(
        result.failures
    )
    assert result.stop_reason == "completed"
    assert set(result.phases) >= {"examples", "coverage", "fuzzing", "stateful"}
    # Every check ran: response conformance, acceptance and rejection, use after free, ...
    assert set(result.checks) >= {
        "not_a_server_error",
        "status_code_conformance",
        "content_type_conformance",
        "response_schema_conformance",
        "response_headers_conformance",
        "positive_data_acceptance",
        "negative_data_rejection",
        "use_after_free",
        "ensure_resource_availability",
        "ignored_auth",
    }, result.checks
    # Every operation was called; every one taking an id, with a real one (a status only an
    # existing connector gets: 2xx, or 409 for a state conflict).
    unreached = []
    for route in ROUTES:
        if route.operation_id in STREAMS:
            continue
        statuses = served.get((route.method, openapi_path(route.path)), set())
        needs_real_id = "{id}" in route.path
        if not statuses or (needs_real_id and not {s for s in statuses if s < 300 or s == 409}):
            unreached.append(f"{route.method} {route.path}: {sorted(statuses)}")
    assert not unreached, unreached


# --- what the fuzzer found, pinned --------------------------------------------------------

_B64URL = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


@settings(max_examples=400, deadline=None)
@given(
    st.one_of(
        st.text(alphabet=_B64URL + "~=+/ %", max_size=10),
        st.binary(max_size=9).map(_b64),
        st.lists(st.sampled_from([b"\0", b"\xff", b"\xc3\xa9", b"a", b"\xe2\x82"])).map(
            lambda parts: _b64(b"".join(parts))
        ),
    )
)
def test_the_cursor_pattern_is_exactly_what_the_server_takes(raw: str) -> None:
    """Cursors: base64url of anything without a zero byte (not UTF-8: read with U+FFFD)."""
    from syncd.errors import ValidationError
    from syncd.service.cursors import CURSOR_PATTERN, parse_cursor

    described = re.fullmatch(CURSOR_PATTERN, raw) is not None
    try:
        parse_cursor(raw)
    except ValidationError:
        taken = False
    else:
        taken = True
    assert described == taken


@settings(max_examples=100, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.from_regex(CRON_PATTERN, fullmatch=True), st.from_regex(URL_PATTERN, fullmatch=True))
def test_what_the_cron_and_url_patterns_describe_is_accepted(cron: str, url: str) -> None:
    """The server refuses what these patterns do not match; what they match it takes."""
    from syncd.models import DEFAULT_PAGINATOR
    from syncd.plugins import Registry
    from syncd.schema.spec import parse_create

    body = {"name": "n", "source": {"url": url}, "sync_schedule": cron}
    parse_create(body, defaults=DEFAULT_PAGINATOR, kinds=Registry.builtin())


async def test_a_concrete_path_wins_and_405_lists_its_methods(api: Api) -> None:
    """GET /connectors/preview is not GET /connectors/{id} with the id "preview"."""
    for method in ("GET", "PATCH", "DELETE", "OPTIONS"):
        reply = await api.call(method, "/connectors/preview")
        assert (reply.status, reply.headers["Allow"]) == (405, "POST"), method
    reply = await api.call("PUT", "/connectors/x")
    assert (reply.status, reply.headers["Allow"]) == (405, "DELETE,GET,PATCH")


async def test_a_wrong_method_on_a_public_path_needs_no_token(start_daemon: StartDaemon) -> None:
    h = await start_daemon(token="t" * 20)
    reply = await h.api.call("POST", "/healthz", auth=False)
    assert (reply.status, reply.headers["Allow"]) == (405, "GET")
    reply = await h.api.call("PUT", "/connectors", auth=False)
    assert reply.status == 401


async def test_whole_numbers_written_as_floats_are_integers(api: Api) -> None:
    """JSON Schema's "integer" admits 3.0: so does the server (and stores 3)."""
    body = {"name": "f", "source": {"type": "feed"}, "page_retries": 3.0}
    reply = await api.post("/connectors", {**body, "retry_on_status": [502.0]})
    assert reply.status == 201, reply.body
    assert (reply.body["page_retries"], reply.body["retry_on_status"]) == (3, [502])
    reply = await api.post("/connectors", {**body, "name": "g", "page_retries": 3.5})
    assert reply.status == 422


async def test_the_description_links_pages_to_their_items(api: Api) -> None:
    doc = (await api.get("/openapi.json")).body
    documents = doc["paths"]["/connectors/{id}/documents"]["get"]["responses"]["200"]
    assert documents["links"]["get_document"]["parameters"] == {
        "id": "$request.path.id",
        "external_id": "$response.body#/data/0/external_id",
    }
    connectors = doc["paths"]["/connectors"]["get"]["responses"]["200"]["links"]
    assert connectors["get_connector"]["parameters"] == {"id": "$response.body#/data/0/id"}
