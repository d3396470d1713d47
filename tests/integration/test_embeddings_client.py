"""The embeddings client of the ``pgvector`` indexer (:mod:`syncd.indexers.pgvector.embeddings`)
against the local OpenAI-compatible server of :mod:`tests.integration.embeddingserver`: the
request it sends, batching, the checks of the answer, refusals, retries through the
transport, and the API key kept out of errors."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from syncd.http.transport import Transport
from syncd.indexers.pgvector.embeddings import EmbeddingsClient, EmbeddingsError, endpoint_url
from syncd.observability.logs import redact
from tests.integration.embeddingserver import EmbeddingServer, embed_text

KEY = "sk-test-canary-51c0ffee"
MODEL = "text-embedding-3-small"


class Sleeps(list[float]):
    async def __call__(self, delay: float) -> None:
        self.append(delay)


@pytest.fixture
async def server() -> AsyncIterator[EmbeddingServer]:
    async with EmbeddingServer(api_key=KEY) as s:
        yield s


@pytest.fixture
async def sleeps() -> Sleeps:
    return Sleeps()


@pytest.fixture
async def transport(sleeps: Sleeps) -> AsyncIterator[Transport]:
    async with Transport(sleep=sleeps) as t:
        yield t


def client(
    server: EmbeddingServer, transport: Transport, *, dimensions: int = 32, **extra: object
) -> EmbeddingsClient:
    options: dict[str, object] = {"api_key": KEY, **extra}
    return EmbeddingsClient(
        transport,
        url=server.url,
        model=MODEL,
        dimensions=dimensions,
        **options,  # type: ignore[arg-type]
    )


def test_endpoint_url_takes_a_base_or_the_full_path() -> None:
    assert endpoint_url("https://api.openai.com/v1") == "https://api.openai.com/v1/embeddings"
    assert endpoint_url("http://localhost:11434/v1/") == "http://localhost:11434/v1/embeddings"
    assert endpoint_url("http://h/v1/embeddings") == "http://h/v1/embeddings"
    azure = "https://r.openai.azure.com/openai/deployments/d/embeddings?api-version=2024-02-01"
    assert endpoint_url(azure) == azure


async def test_vectors_in_input_order_in_batches(
    server: EmbeddingServer, transport: Transport
) -> None:
    texts = [f"text number {i}" for i in range(7)]
    vectors = await client(server, transport, batch_size=3).embed(texts)
    assert vectors == [pytest.approx(embed_text(t, 32)) for t in texts]
    # 3 + 3 + 1 inputs, each request as the contract has it, the key as a bearer token.
    assert [len(r.body["input"]) for r in server.requests] == [3, 3, 1]
    first = server.requests[0]
    assert first.path == "/v1/embeddings"
    assert first.headers["Authorization"] == f"Bearer {KEY}"
    assert first.body == {
        "model": MODEL,
        "input": texts[:3],
        "dimensions": 32,
        "encoding_format": "float",
    }
    assert server.embedded == texts


async def test_items_answered_out_of_order_are_put_back_by_index(
    server: EmbeddingServer, transport: Transport
) -> None:
    server.misbehave("reversed")
    texts = ["alpha beta", "gamma delta", "epsilon"]
    vectors = await client(server, transport).embed(texts)
    assert vectors == [pytest.approx(embed_text(t, 32)) for t in texts]


@pytest.mark.parametrize(
    ("kind", "message"),
    [
        ("short", "2 embeddings for 3 inputs"),
        ("long_vector", "embedding 0 has 33 dimensions, not the 32 configured"),
        ("bad_index", "item 0 has no valid index"),
    ],
)
async def test_an_answer_that_is_not_the_vectors_asked_for_is_refused(
    server: EmbeddingServer, transport: Transport, kind: str, message: str
) -> None:
    server.misbehave(kind)
    with pytest.raises(EmbeddingsError, match=message) as caught:
        await client(server, transport).embed(["a b", "c d", "e f"])
    assert "embeddings endpoint http://127.0.0.1:" in str(caught.value)


async def test_dimensions_the_model_cannot_give_are_the_endpoint_s_400(
    server: EmbeddingServer, transport: Transport
) -> None:
    with pytest.raises(EmbeddingsError, match=r"HTTP 400 invalid_request_error: Invalid value"):
        await client(server, transport, dimensions=5000).embed(["x"])


async def test_a_wrong_key_is_a_401_that_never_shows_the_key(
    server: EmbeddingServer, transport: Transport
) -> None:
    wrong = EmbeddingsClient(
        transport, url=server.url, model=MODEL, dimensions=8, api_key="sk-wrong-canary-77"
    )
    with pytest.raises(EmbeddingsError, match="HTTP 401 invalid_api_key") as caught:
        await wrong.embed(["x"])
    assert "sk-wrong-canary-77" not in str(caught.value)
    # Registered with the log redaction before it was sent.
    assert "sk-wrong-canary-77" not in redact("key sk-wrong-canary-77 here")


async def test_the_key_is_read_from_a_reference_per_request(
    server: EmbeddingServer, transport: Transport, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("EMBED_TEST_KEY", KEY)
    vectors = await client(server, transport, api_key="${env:EMBED_TEST_KEY}").embed(["x y"])
    assert len(vectors) == 1
    assert server.requests[-1].headers["Authorization"] == f"Bearer {KEY}"


async def test_429_with_retry_after_is_waited_out_and_sent_again(
    server: EmbeddingServer, transport: Transport, sleeps: Sleeps
) -> None:
    server.fail_next(429, retry_after="2")
    vectors = await client(server, transport).embed(["a b c"])
    assert vectors == [pytest.approx(embed_text("a b c", 32))]
    assert len(server.requests) == 2
    assert 2.0 in sleeps


async def test_503_is_retried_500_is_not(
    server: EmbeddingServer, transport: Transport, sleeps: Sleeps
) -> None:
    server.fail_next(503)
    assert len(await client(server, transport).embed(["a"])) == 1
    assert len(server.requests) == 2

    server.fail_next(500)
    with pytest.raises(EmbeddingsError, match="HTTP 500 server_error: The server had an error"):
        await client(server, transport).embed(["b"])
    assert len(server.requests) == 3
    assert server.embedded == ["a"]


@pytest.mark.parametrize(
    ("vector", "message"),
    [
        ([0.5, "x"], "embedding 0 is not a list of numbers"),
        ([0.5, None], "embedding 0 is not a list of numbers"),
        ({"a": 1}, "embedding 0 is not a list of numbers"),
        ([float("nan"), 1.0], "embedding 0 holds a value that is not finite"),
        ([float("inf"), float("-inf")], "embedding 0 holds a value that is not finite"),
        ([1e308, 1e308], "embedding 0 holds a value that is not finite"),
    ],
)
async def test_vectors_must_be_finite_numbers(
    server: EmbeddingServer, transport: Transport, vector: object, message: str
) -> None:
    answer = {"data": [{"index": 0, "embedding": vector}]}
    with pytest.raises(EmbeddingsError, match=message):
        client(server, transport, dimensions=2)._vectors(answer, 1)
