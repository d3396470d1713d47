"""A client of an OpenAI-compatible embeddings endpoint (``POST …/embeddings``), for the
``pgvector`` indexer. OpenAI, Azure OpenAI, Ollama, vLLM, text-embeddings-inference and LiteLLM
speak it.

- ``url`` is the API base, as OpenAI's own clients take it (``https://api.openai.com/v1``,
  ``http://localhost:11434/v1``): requests go to ``{url}/embeddings``. A URL whose path already
  ends in ``/embeddings`` is used as it is (a query string is kept: Azure's ``api-version``).
- ``model`` and ``dimensions`` are sent with every request; ``dimensions`` is also the vector
  length every answer must have. ``encoding_format`` is always ``float``.
- ``api_key`` (optional; ``${env:NAME}``/``${file:/path}`` resolved per request, so a rotated
  file is picked up) goes out as ``Authorization: Bearer <key>``. It is registered with the
  log redaction before the first request that carries it, and no error this module raises
  quotes a request header or the key.
- ``batch_size`` inputs at most per request: :meth:`EmbeddingsClient.embed` splits a longer
  list and puts the vectors back in input order.
- Requests go through the daemon's shared transport (per-host budgets, ``Retry-After`` and
  rate-limit waits, retries of 502/503/504 and dropped connections — an embeddings request
  has no side effect, so it is marked idempotent — and cancellation by an abort). A refusal
  still standing is an :class:`EmbeddingsError` with the status and the endpoint's
  ``error.message``.
- Every answer is checked before it is used: one item per input, each ``index`` in range and
  seen once (items are put in ``index`` order, as the contract numbers them), every vector a
  list of ``dimensions`` finite numbers.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import orjson
from yarl import URL

from syncd.config.secrets import resolve_secret
from syncd.errors import SyncdError
from syncd.http.transport import Transport
from syncd.observability.logs import MASK, register_secret

__all__ = ["DEFAULT_BATCH_SIZE", "EmbeddingsClient", "EmbeddingsError", "endpoint_url"]

DEFAULT_BATCH_SIZE = 64
MAX_BATCH_SIZE = 2048  # inputs per request in the OpenAI contract
_MAX_MESSAGE = 300


class EmbeddingsError(SyncdError):
    """The endpoint refused a request, or answered something that is not the vectors asked
    for."""


def endpoint_url(url: str) -> str:
    """The URL the requests go to: ``{url}/embeddings``, or ``url`` when its path already
    ends in ``/embeddings``."""
    parsed = URL(url).with_fragment(None)
    path = parsed.path.rstrip("/")
    if not path.endswith("/embeddings"):
        path = f"{path}/embeddings"
    # with_path drops the query: put it back.
    return str(parsed.with_path(path).with_query(parsed.query_string or None))


class EmbeddingsClient:
    """Embeds texts through ``transport`` (see the module docstring)."""

    def __init__(
        self,
        transport: Transport,
        *,
        url: str,
        model: str,
        dimensions: int,
        api_key: str | None = None,
        batch_size: int = DEFAULT_BATCH_SIZE,
    ) -> None:
        if not 1 <= batch_size <= MAX_BATCH_SIZE:
            raise ValueError(f"batch_size must be within 1..{MAX_BATCH_SIZE}")
        self._transport = transport
        self.url = endpoint_url(url)
        self.model = model
        self.dimensions = dimensions
        self.batch_size = batch_size
        self._api_key = api_key
        self._registered: set[str] = set()

    def target(self) -> str:
        """The endpoint and model, for messages (the URL without its credentials)."""
        shown = URL(self.url).with_user(None).with_password(None).with_query(None)
        return f"embeddings endpoint {shown} (model {self.model!r})"

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """One vector per text, in order, in requests of at most ``batch_size`` texts."""
        vectors: list[list[float]] = []
        for start in range(0, len(texts), self.batch_size):
            vectors.extend(await self._request(texts[start : start + self.batch_size]))
        return vectors

    async def _request(self, texts: Sequence[str]) -> list[list[float]]:
        body = orjson.dumps(
            {
                "model": self.model,
                "input": list(texts),
                "dimensions": self.dimensions,
                "encoding_format": "float",
            }
        )
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        key = None
        if self._api_key is not None:
            key = resolve_secret("api_key", self._api_key)
            if key not in self._registered:
                self._registered.add(key)
                register_secret(key)
            headers["Authorization"] = f"Bearer {key}"
        response = await self._transport.request(
            "POST",
            self.url,
            headers=headers,
            content=body,
            raise_for_status=False,
            # Same inputs, same vectors, nothing written: safe to send again.
            idempotent=True,
        )
        if not 200 <= response.status < 300:
            refusal = _refusal(response.status, response.body)
            if key is not None:  # an endpoint that quotes the key it refused
                refusal = refusal.replace(key, MASK)
            raise EmbeddingsError(f"{self.target()}: {refusal}")
        try:
            answer = orjson.loads(response.body)
        except orjson.JSONDecodeError:
            raise EmbeddingsError(f"{self.target()}: the answer is not JSON") from None
        try:
            return self._vectors(answer, len(texts))
        except EmbeddingsError as exc:
            raise EmbeddingsError(f"{self.target()}: {exc}") from None

    def _vectors(self, answer: Any, count: int) -> list[list[float]]:
        data = answer.get("data") if isinstance(answer, Mapping) else None
        if not isinstance(data, list):
            raise EmbeddingsError("the answer has no 'data' list")
        if len(data) != count:
            raise EmbeddingsError(f"{len(data)} embeddings for {count} inputs")
        ordered: list[list[float] | None] = [None] * count
        for position, item in enumerate(data):
            index = item.get("index", position) if isinstance(item, Mapping) else None
            if not isinstance(index, int) or isinstance(index, bool) or not 0 <= index < count:
                raise EmbeddingsError(f"item {position} has no valid index (got {index!r})")
            if ordered[index] is not None:
                raise EmbeddingsError(f"index {index} is answered twice")
            ordered[index] = self._vector(item.get("embedding"), index)
        return [vector for vector in ordered if vector is not None]

    def _vector(self, value: Any, index: int) -> list[float]:
        if not isinstance(value, list):
            raise EmbeddingsError(f"embedding {index} is not a list of numbers")
        if len(value) != self.dimensions:
            raise EmbeddingsError(
                f"embedding {index} has {len(value)} dimensions, not the {self.dimensions} "
                "configured (does the model support 'dimensions'?)"
            )
        # One pass in C instead of one check per number: a sum is not a number when an item
        # is not one, and is not finite when an item is not (or the numbers are absurd).
        try:
            total = math.fsum(value)
        except TypeError:
            raise EmbeddingsError(f"embedding {index} is not a list of numbers") from None
        except (OverflowError, ValueError):  # inf - inf, or an intermediate overflow
            total = math.inf
        if not math.isfinite(total):
            raise EmbeddingsError(f"embedding {index} holds a value that is not finite")
        return value


def _refusal(status: int, body: bytes) -> str:
    """``HTTP <status> <type>: <message>`` of a refused request (the OpenAI error shape
    ``{"error": {"message", "type", "param", "code"}}``, or the start of the body)."""
    try:
        answer = orjson.loads(body)
    except orjson.JSONDecodeError:
        answer = None
    error = answer.get("error") if isinstance(answer, Mapping) else None
    if isinstance(error, Mapping):
        kind = error.get("code") or error.get("type")
        message = str(error.get("message") or "").strip()
        head = f"HTTP {status} {kind}" if isinstance(kind, str) and kind else f"HTTP {status}"
        return f"{head}: {message[:_MAX_MESSAGE]}" if message else head
    if isinstance(error, str) and error:  # some servers answer {"error": "..."}
        return f"HTTP {status}: {error[:_MAX_MESSAGE]}"
    text = body.decode("utf-8", errors="replace").strip()
    return f"HTTP {status}: {text[:_MAX_MESSAGE]}" if text else f"HTTP {status}"
