"""The splitter of the ``pgvector`` indexer (:mod:`syncd.indexers.pgvector.chunking`): sizes in
characters and in tokens, overlap, blank texts, and clear refusals."""

from __future__ import annotations

import itertools

import pytest
from semantic_text_splitter import TextSplitter

from syncd.indexers.pgvector.chunking import (
    DEFAULT_TOKENIZER,
    Chunker,
    ChunkingError,
    record_text,
    tokenizer_for,
)

TEXT = (
    "Refunds are issued within five days. The card used for the purchase is credited.\n\n"
    "Shipping takes two weeks to Europe. Tracking numbers arrive by mail.\n\n"
    "Passwords can be reset from the login page; the link expires after an hour."
)


def test_characters_bound_every_chunk_and_cut_at_paragraphs_then_sentences() -> None:
    chunks = Chunker(size=70).split(TEXT)
    assert all(len(chunk) <= 70 for chunk in chunks)
    # Nothing is lost or reordered.
    assert " ".join(chunks).split() == TEXT.split()
    # A paragraph that fits is one chunk; a longer one is cut between its sentences.
    assert chunks[:3] == [
        "Refunds are issued within five days.",
        "The card used for the purchase is credited.",
        "Shipping takes two weeks to Europe. Tracking numbers arrive by mail.",
    ]


def test_a_text_that_fits_is_one_chunk() -> None:
    assert Chunker(size=1000).split(TEXT) == [TEXT]


def test_overlap_repeats_the_end_of_a_chunk_at_the_start_of_the_next() -> None:
    words = " ".join(f"w{i}" for i in range(60))
    chunks = Chunker(size=40, overlap=15).split(words)
    assert len(chunks) > 2
    for left, right in itertools.pairwise(chunks):
        assert right.split()[0] in left.split()  # shared words
        assert len(right) <= 40


def test_tokens_count_with_the_tiktoken_tables_of_the_wheel() -> None:
    chunks = Chunker(size=12, unit="tokens", tokenizer="text-embedding-3-small").split(TEXT)
    counter = TextSplitter.from_tiktoken_model("text-embedding-3-small", 10_000)
    assert len(chunks) > 3
    # Each chunk is within 12 tokens by the same tokenizer (one chunk is one splitter unit).
    assert all(len(counter.chunk_indices(c)) == 1 for c in chunks)
    assert " ".join(chunks).split() == TEXT.split()


def test_blank_text_has_no_chunks() -> None:
    chunker = Chunker(size=10)
    assert chunker.split("") == []
    assert chunker.split(" \n\t ") == []


@pytest.mark.parametrize(("size", "overlap"), [(0, 0), (10, 10), (10, 11), (10, -1)])
def test_sizes_are_refused_clearly(size: int, overlap: int) -> None:
    with pytest.raises(ChunkingError, match="chunk_"):
        Chunker(size=size, overlap=overlap)


def test_tokenizer_names() -> None:
    # A model tiktoken knows counts its own tokens; any other falls back to the default.
    assert tokenizer_for("text-embedding-3-large", None) == "text-embedding-3-large"
    assert tokenizer_for("nomic-embed-text", None) == DEFAULT_TOKENIZER
    assert tokenizer_for("nomic-embed-text", "gpt-4o") == "gpt-4o"
    with pytest.raises(ChunkingError, match="tokenizer 'no-such-model'"):
        tokenizer_for("text-embedding-3-small", "no-such-model")


def test_a_record_without_a_mapping_is_rendered_as_path_value_lines() -> None:
    record = {
        "id": 7,
        "title": "Refunds",
        "done": True,
        "empty": "",
        "none": None,
        "author": {"name": "Ada", "tags": ["billing", "cards"]},
    }
    assert record_text(record) == (
        "id: 7\ntitle: Refunds\ndone: true\nauthor.name: Ada\nauthor.tags.0: billing\n"
        "author.tags.1: cards"
    )
    assert record_text("plain") == "plain"
    assert record_text(None) == ""
