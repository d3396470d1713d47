"""Splitting a document's text into the chunks the ``pgvector`` indexer embeds.

The splitter is PyPI's ``semantic-text-splitter`` (the ``text-splitter`` Rust crate; the
``pgvector`` extra installs it). It cuts at the largest semantic unit that fits — paragraphs,
then sentences, then words, then graphemes — and merges neighbours up to ``chunk_size``:

- ``unit: characters`` (the default): sizes count Unicode characters.
- ``unit: tokens``: sizes count tokens of an OpenAI tokenizer (tiktoken's ``cl100k_base`` or
  ``o200k_base``, chosen by ``tokenizer``, an OpenAI model name). The tiktoken tables are
  compiled into the splitter's wheel, so nothing is downloaded at runtime. Hugging Face
  tokenizers are not offered: they are fetched from the Hub or read from a file the user must
  provide, and a daemon that downloads a model when a connector is created is a surprise.
  For a model that is not OpenAI's the token counts are an approximation; leave headroom.

``chunk_overlap`` (same unit, smaller than ``chunk_size``) is the most text two neighbouring
chunks share. Whitespace at the ends of chunks is trimmed; a text with nothing but whitespace
has no chunks.

What is split is the document's ``text`` (its ``document`` mapping). A connector without a
mapping has no ``text``: its records are split as :func:`record_text` renders them, one
``path: value`` line per value, as other loaders into vector stores do by default.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from syncd.errors import SyncdError

if TYPE_CHECKING:
    from semantic_text_splitter import TextSplitter

__all__ = [
    "DEFAULT_TOKENIZER",
    "Chunker",
    "ChunkingError",
    "Unit",
    "record_text",
    "tokenizer_for",
]

Unit = Literal["characters", "tokens"]
#: The tokenizer when neither ``tokenizer`` nor a model tiktoken knows is given (cl100k_base).
DEFAULT_TOKENIZER = "text-embedding-3-small"


class ChunkingError(SyncdError):
    """A splitter cannot be made as configured (sizes, tokenizer, the extra missing)."""


def _splitter_module() -> object:
    try:
        import semantic_text_splitter
    except ImportError:  # pragma: no cover - the extra is installed with the tests
        raise ChunkingError(
            "the pgvector indexer needs semantic-text-splitter: pip install 'syncd[pgvector]'"
        ) from None
    return semantic_text_splitter


def tokenizer_for(model: str, tokenizer: str | None) -> str:
    """The OpenAI model name whose tiktoken encoding counts tokens: ``tokenizer`` when given
    (refused with :class:`ChunkingError` when tiktoken does not know it), else ``model`` when
    tiktoken knows it, else :data:`DEFAULT_TOKENIZER`."""
    if tokenizer is not None:
        _tiktoken_splitter(tokenizer, 2, 0)  # raises when unknown
        return tokenizer
    try:
        _tiktoken_splitter(model, 2, 0)
    except ChunkingError:
        return DEFAULT_TOKENIZER
    return model


def _tiktoken_splitter(model: str, size: int, overlap: int) -> TextSplitter:
    module = _splitter_module()
    splitter_class: type[TextSplitter] = module.TextSplitter  # type: ignore[attr-defined]
    try:
        return splitter_class.from_tiktoken_model(model, size, overlap=overlap)
    except Exception as exc:  # the binding raises a bare Exception for an unknown model
        raise ChunkingError(f"tokenizer {model!r}: {exc}") from None


@dataclass(frozen=True)
class Chunker:
    """Splits texts into chunks of at most ``size`` units, neighbours sharing at most
    ``overlap`` (see the module docstring). ``tokenizer`` (``unit: tokens`` only) is an
    OpenAI model name (:func:`tokenizer_for`)."""

    size: int
    overlap: int = 0
    unit: Unit = "characters"
    tokenizer: str = DEFAULT_TOKENIZER
    _splitter: TextSplitter = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.size < 1:
            raise ChunkingError("chunk_size must be at least 1")
        if not 0 <= self.overlap < self.size:
            raise ChunkingError("chunk_overlap must be at least 0 and smaller than chunk_size")
        if self.unit == "tokens":
            splitter = _tiktoken_splitter(self.tokenizer, self.size, self.overlap)
        else:
            module = _splitter_module()
            splitter = module.TextSplitter(self.size, overlap=self.overlap)  # type: ignore[attr-defined]
        object.__setattr__(self, "_splitter", splitter)

    def split(self, text: str) -> list[str]:
        """The chunks of ``text``, in order (none for a blank text)."""
        if not text or text.isspace():
            return []
        return [chunk for chunk in self._splitter.chunks(text) if chunk.strip()]


def record_text(payload: Any) -> str:
    """The text of a record that has no ``document`` mapping: one ``path: value`` line per
    string, number or boolean in it, in the payload's order (syncd stores JSON with sorted
    keys; nested keys dotted, list items by index; nulls and empty strings left out). Keys
    then carry their meaning into the embedding ("title: Refunds", "status: closed")."""
    lines: list[str] = []
    _leaves(payload, "", lines)
    return "\n".join(lines)


def _leaves(value: Any, path: str, lines: list[str]) -> None:
    if isinstance(value, Mapping):
        for key, item in value.items():
            _leaves(item, f"{path}.{key}" if path else str(key), lines)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            _leaves(item, f"{path}.{index}" if path else str(index), lines)
    elif isinstance(value, bool):
        lines.append(f"{path}: {'true' if value else 'false'}")
    elif isinstance(value, int | float | str) and value != "":
        lines.append(f"{path}: {value}" if path else str(value))
