"""Secrets in config models: a one-line text that may hold ``${env:}``/``${file:}``
references, never the mask (:data:`~syncd.observability.logs.MASK`) that answers show in its
place — sent back as it was shown, the mask would replace the secret."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BeforeValidator, WithJsonSchema

from syncd.observability.logs import MASK
from syncd.schema.fields import MSG_NON_EMPTY, fail, ref_pattern, ref_problem

__all__ = ["MSG_MASKED", "SecretText", "secret_text", "secret_text_schema", "unmasked"]

MSG_MASKED = (
    f'Still masked ("{MASK}"): write the secret or a ${{env:NAME}} / ${{file:/path}} reference'
)


def unmasked() -> dict[str, Any]:
    """The JSON Schema that refuses the mask."""
    return {"not": {"const": MASK}}


def secret_text_schema() -> dict[str, Any]:
    """The JSON Schema of :data:`SecretText` (a new object on each call)."""
    return {"type": "string", "minLength": 1, "pattern": ref_pattern("\\r\\n"), **unmasked()}


def secret_text(value: Any) -> Any:
    """The check of :data:`SecretText`."""
    if not isinstance(value, str) or not value:
        fail(MSG_NON_EMPTY)
    if value == MASK:
        fail(MSG_MASKED)
    if "\x00" in value:
        fail("Must not contain NUL")
    if problem := ref_problem(value):
        fail(problem)
    if "\n" in value or "\r" in value:
        fail("Must not contain line breaks")
    return value


SecretText = Annotated[str, BeforeValidator(secret_text), WithJsonSchema(secret_text_schema())]
"""A secret: one line of text, not the mask, ``${env:}``/``${file:}`` references allowed."""
