"""A local OpenAI-compatible embeddings endpoint: what the ``pgvector`` indexer asks for vectors.

An ``aiohttp.web`` server on 127.0.0.1, port 0, serving ``POST /v1/embeddings`` as the OpenAI
API reference describes it (https://developers.openai.com/api/docs/api-reference/embeddings;
errors as in https://platform.openai.com/docs/guides/error-codes), written from the reference,
not from what syncd sends:

- Request body: ``model`` (required; a model this server does not know: 404
  ``model_not_found``), ``input`` (required; a string or an array of at most 2048 strings, none
  empty; token arrays are part of the contract but are refused here with a 400 naming it),
  ``dimensions`` (optional, ``1..`` the model's native size; refused for
  ``text-embedding-ada-002``, which cannot shorten its vectors), ``encoding_format`` (``float``,
  the default, or ``base64``: little-endian float32), ``user`` (ignored).
- Answer: ``{"object": "list", "data": [{"object": "embedding", "index": i, "embedding":
  [...]}, ...], "model": <model>, "usage": {"prompt_tokens": n, "total_tokens": n}}``, one item
  per input in input order.
- Errors: ``{"error": {"message", "type", "param", "code"}}`` — 401 ``invalid_api_key`` without
  ``Authorization: Bearer <api_key>`` (when the server has one; the message never repeats the
  key), 400 ``invalid_request_error`` for a malformed body, 429 ``rate_limit_exceeded`` (with
  ``Retry-After``) and 500 ``server_error`` on demand (:meth:`EmbeddingServer.fail_next`).

Vectors are deterministic: a hashed bag of words (each lowercased word adds ±1 to one of the
``dimensions`` components, chosen by a hash of the word), L2-normalised, so that texts sharing
words are near by cosine distance and a query embedded the same way finds them.
:func:`embed_text` is that function, for tests that compute the expected vectors.

Inspection: :attr:`EmbeddingServer.embedded` lists every input text it answered with a vector,
in order (so a test proves what was — and was not — embedded again);
:attr:`EmbeddingServer.requests` keeps each request. :meth:`EmbeddingServer.misbehave` breaks
the next answers on purpose (too few vectors, wrong lengths, indexes out of order) for the
client's checks.

Not modelled: token-array inputs, per-token limits (8192 per input, 300 000 per request),
rate-limit headers other than ``Retry-After``, organisations and projects.
"""

from __future__ import annotations

import base64
import hashlib
import math
import re
import struct
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

from aiohttp import web

__all__ = ["MODELS", "EmbeddingServer", "embed_text"]

#: The models served and their native vector sizes (as OpenAI's embedding models).
MODELS = {
    "text-embedding-3-small": 1536,
    "text-embedding-3-large": 3072,
    "text-embedding-ada-002": 1536,
}
MAX_INPUTS = 2048
_WORD = re.compile(r"\w+", re.UNICODE)


def embed_text(text: str, dimensions: int) -> list[float]:
    """The server's vector for ``text``: a signed, hashed bag of its lowercased words,
    L2-normalised (a text without words hashes as a whole)."""
    vector = [0.0] * dimensions
    words = _WORD.findall(text.lower()) or [text]
    for word in words:
        digest = hashlib.blake2b(word.encode(), digest_size=8).digest()
        number = int.from_bytes(digest, "little")
        vector[number % dimensions] += 1.0 if number >> 63 else -1.0
    norm = math.sqrt(sum(v * v for v in vector))
    if norm == 0.0:  # the words cancelled out
        vector[0], norm = 1.0, 1.0
    return [v / norm for v in vector]


@dataclass(frozen=True)
class RecordedRequest:
    """One request the server received."""

    path: str
    headers: dict[str, str] = field(repr=False)
    body: Any = field(repr=False)


@dataclass
class _Failure:
    status: int
    remaining: int
    retry_after: str | None


class _Refusal(Exception):
    def __init__(
        self, status: int, message: str, kind: str, *, param: str | None = None, code: Any = None
    ) -> None:
        super().__init__(message)
        self.status, self.message, self.kind, self.param, self.code = (
            status,
            message,
            kind,
            param,
            code,
        )


class EmbeddingServer:
    """See the module docstring. ``api_key``: the bearer token required (``None``: none)."""

    def __init__(self, *, api_key: str | None = None) -> None:
        self.api_key = api_key
        self.embedded: list[str] = []
        self.requests: list[RecordedRequest] = []
        self._failures: list[_Failure] = []
        self._misbehaviour: list[str] = []
        self._runner: web.AppRunner | None = None
        self.url = ""

    # --- lifecycle ------------------------------------------------------------------------

    async def start(self) -> None:
        """Serve on 127.0.0.1, on a free port; :attr:`url` is the API base (``…/v1``)."""
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post("/v1/embeddings", self._embeddings)
        self._runner = web.AppRunner(app, handle_signals=False, shutdown_timeout=1.0)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", 0).start()
        self.url = f"http://127.0.0.1:{self._runner.addresses[0][1]}/v1"

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> EmbeddingServer:
        await self.start()
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.stop()

    # --- scripting ------------------------------------------------------------------------

    def fail_next(self, status: int, *, times: int = 1, retry_after: str | None = None) -> None:
        """Answer the next ``times`` requests with ``status`` (429: ``rate_limit_exceeded``,
        with ``Retry-After: retry_after`` when given; 5xx: ``server_error``), after
        authentication and before embedding anything."""
        self._failures.append(_Failure(status, times, retry_after))

    def misbehave(self, *kinds: str) -> None:
        """Break the next answers, one per kind: ``short`` (one vector fewer), ``long_vector``
        (the first vector one component longer), ``reversed`` (items in reverse order, their
        ``index`` kept), ``bad_index`` (the first item's ``index`` out of range)."""
        self._misbehaviour.extend(kinds)

    # --- the endpoint ---------------------------------------------------------------------

    async def _embeddings(self, request: web.Request) -> web.Response:
        try:
            body: Any = await request.json()
        except ValueError:
            body = None
        self.requests.append(RecordedRequest(request.path, dict(request.headers), body))
        try:
            self._authenticate(request)
            failure = self._next_failure()
            if failure is not None:
                return failure
            answer = self._answer(body)
        except _Refusal as refusal:
            return _error(refusal)
        return web.json_response(answer)

    def _authenticate(self, request: web.Request) -> None:
        if self.api_key is None:
            return
        header = request.headers.get("Authorization", "")
        if not header.startswith("Bearer "):
            raise _Refusal(
                401,
                "You didn't provide an API key. You need to provide your API key in an "
                "Authorization header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY).",
                "invalid_request_error",
            )
        if header.removeprefix("Bearer ") != self.api_key:
            raise _Refusal(
                401, "Incorrect API key provided.", "invalid_request_error", code="invalid_api_key"
            )

    def _next_failure(self) -> web.Response | None:
        if not self._failures:
            return None
        failure = self._failures[0]
        failure.remaining -= 1
        if failure.remaining <= 0:
            self._failures.pop(0)
        if failure.status == 429:
            refusal = _Refusal(
                429,
                "Rate limit reached for requests. Please try again later.",
                "requests",
                code="rate_limit_exceeded",
            )
        else:
            refusal = _Refusal(
                failure.status,
                "The server had an error while processing your request. Sorry about that!",
                "server_error",
            )
        response = _error(refusal)
        if failure.retry_after is not None:
            response.headers["Retry-After"] = failure.retry_after
        return response

    def _answer(self, body: Any) -> dict[str, Any]:
        if not isinstance(body, Mapping):
            raise _Refusal(400, "The request body is not valid JSON.", "invalid_request_error")
        model = body.get("model")
        if not isinstance(model, str) or not model:
            raise _Refusal(400, "You must provide a model parameter.", "invalid_request_error")
        if model not in MODELS:
            raise _Refusal(
                404,
                f"The model `{model}` does not exist or you do not have access to it.",
                "invalid_request_error",
                code="model_not_found",
            )
        inputs = _inputs(body.get("input"))
        dimensions = _dimensions(body.get("dimensions"), model)
        encoding = body.get("encoding_format", "float")
        if encoding not in ("float", "base64"):
            raise _Refusal(
                400,
                f"'{encoding}' is not one of ['float', 'base64'] - 'encoding_format'",
                "invalid_request_error",
                param="encoding_format",
            )
        vectors = [embed_text(text, dimensions) for text in inputs]
        self.embedded.extend(inputs)
        items: list[dict[str, Any]] = [
            {"object": "embedding", "index": i, "embedding": v} for i, v in enumerate(vectors)
        ]
        items = self._broken(items)
        if encoding == "base64":
            for item in items:
                packed = struct.pack(f"<{len(item['embedding'])}f", *item["embedding"])
                item["embedding"] = base64.b64encode(packed).decode("ascii")
        tokens = sum(len(_WORD.findall(text)) or 1 for text in inputs)
        return {
            "object": "list",
            "data": items,
            "model": model,
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
        }

    def _broken(self, items: list[dict[str, Any]]) -> list[dict[str, Any]]:
        if not self._misbehaviour:
            return items
        kind = self._misbehaviour.pop(0)
        if kind == "short":
            return items[:-1]
        if kind == "long_vector":
            items[0]["embedding"] = [*items[0]["embedding"], 0.0]
        elif kind == "reversed":
            return items[::-1]
        elif kind == "bad_index":
            items[0]["index"] = len(items) + 5
        return items


def _inputs(value: Any) -> list[str]:
    if isinstance(value, str):
        values: list[Any] = [value]
    elif isinstance(value, list) and value:
        values = value
    else:
        raise _Refusal(
            400,
            "'input' is a required property and must be a string or an array.",
            "invalid_request_error",
            param="input",
        )
    if len(values) > MAX_INPUTS:
        raise _Refusal(
            400,
            f"'input' : maximum {MAX_INPUTS} inputs per request, got {len(values)}.",
            "invalid_request_error",
            param="input",
        )
    for item in values:
        if not isinstance(item, str):
            raise _Refusal(
                400,
                "token-array inputs are not served by this test server",
                "invalid_request_error",
                param="input",
            )
        if not item:
            raise _Refusal(
                400,
                "'$.input' is invalid. Please check the API reference: an input cannot be empty.",
                "invalid_request_error",
                param="input",
            )
    return [str(item) for item in values]


def _dimensions(value: Any, model: str) -> int:
    native = MODELS[model]
    if value is None:
        return native
    if model == "text-embedding-ada-002":
        raise _Refusal(
            400,
            "This model does not support specifying dimensions.",
            "invalid_request_error",
            param="dimensions",
        )
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= native:
        raise _Refusal(
            400,
            f"Invalid value for 'dimensions' = {value}. It must be between 1 and {native}.",
            "invalid_request_error",
            param="dimensions",
        )
    return value


def _error(refusal: _Refusal) -> web.Response:
    body = {
        "error": {
            "message": refusal.message,
            "type": refusal.kind,
            "param": refusal.param,
            "code": refusal.code,
        }
    }
    return web.json_response(body, status=refusal.status)
