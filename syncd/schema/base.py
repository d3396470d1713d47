"""What every built-in config model builds on: :class:`KindConfig` (unknown keys refused),
:func:`type_of` and :class:`TypeTagged`, which tells the members of a union of config models
apart by their ``type`` key."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Any, get_args

from pydantic import BaseModel, ConfigDict, GetCoreSchemaHandler
from pydantic_core import CoreSchema

from syncd.schema.fields import MSG_UNKNOWN, tagged_union

__all__ = ["KindConfig", "TypeTagged", "type_of"]


class KindConfig(BaseModel):
    """Base of the built-in configs: unknown keys are refused."""

    model_config = ConfigDict(extra="forbid")


def type_of(model: type[BaseModel]) -> str | None:
    """The ``type`` a config model declares (``type: Literal["name"]``), or ``None``."""
    field = model.model_fields.get("type")
    values = get_args(field.annotation) if field is not None else ()
    return values[0] if len(values) == 1 and isinstance(values[0], str) else None


@dataclass(frozen=True)
class TypeTagged:
    """Marks a union of config models as told apart by their ``type`` key:
    ``Annotated[A | B, TypeTagged("pagination", default="cursor")]``. See
    :func:`~syncd.schema.fields.tagged_union` for the errors it gives."""

    what: str
    default: str | None = None
    passthrough: Collection[str] = ()
    unknown: str = MSG_UNKNOWN

    def __get_pydantic_core_schema__(
        self, source: Any, handler: GetCoreSchemaHandler
    ) -> CoreSchema:
        """The schema of the tagged union of ``source``'s members."""
        members: dict[str, Any] = {}
        for model in get_args(source) or (source,):
            name = type_of(model)
            if name is None:
                raise TypeError(f"{model.__name__} declares no type: Literal[...]")
            members[name] = model
        union = tagged_union(
            members,
            what=self.what,
            default=self.default,
            passthrough=self.passthrough,
            unknown=self.unknown,
        )
        return handler.generate_schema(union)
