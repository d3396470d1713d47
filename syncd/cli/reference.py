"""The connector reference (``docs/connectors.md``), generated from the models' JSON Schema.

:func:`render_reference` writes Markdown: the connector's own keys, then every source kind,
every model reached from it (the pagination styles, ``incremental``, ``timeout``) and every
indexer kind, each as a table of its keys (type, default, range, description, example).
The JSON Schema of :func:`~syncd.schema.connector_file_schema` is the only input, so the
reference says what the server checks and nothing else.

``python -m syncd.cli.reference`` prints it for the built-in kinds; ``--write
docs/connectors.md`` replaces the text between the two marker comments (:data:`START`,
:data:`END`) of that file.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from syncd.plugins import Registry
from syncd.schema.connector import Kinds, connector_file_schema

START = "<!-- connector-reference:start -->"
END = "<!-- connector-reference:end -->"
#: The file that holds the reference, from the top of the repository.
REFERENCE_FILE = "docs/connectors.md"
COMMAND = f"python -m syncd.cli.reference --write {REFERENCE_FILE}"

_REF = "#/$defs/"
_NONE = "\u2014"  # em dash: nothing to say
_TO = "\u2013"  # en dash, between the bounds of a range
_HEAD = "| key | type | default | range | description | example |\n|---|---|---|---|---|---|"

Schema = dict[str, Any]


@dataclass(frozen=True)
class _Section:
    """One model to describe: its heading and its JSON Schema."""

    heading: str
    name: str  # the model's name (a ``$defs`` key), or "" for the connector itself
    schema: Schema

    @property
    def anchor(self) -> str:
        """The heading's anchor as GitHub makes it (lower case, punctuation dropped)."""
        text = re.sub(r"[^\w\- ]", "", self.heading.lower())
        return "#" + text.replace(" ", "-")


def render_reference(kinds: Kinds) -> str:
    """The Markdown reference of a connector file for ``kinds`` (:data:`REFERENCE_FILE`'s,
    for ``Registry.builtin()``)."""
    schema = connector_file_schema(kinds)
    defs: dict[str, Schema] = schema.get("$defs", {})
    sections = list(_sections(schema, defs))
    anchors = {s.name: s.anchor for s in sections if s.name}
    about = {name: _text(model.get("description", "")) for name, model in defs.items()}
    out = [
        f"Generated from the connector models by `{COMMAND}`: change the models "
        "(`syncd/schema/` and each kind's `config.py`), not this text. Strings never hold "
        "NUL; the patterns of URLs, "
        "paths, header names and `${env:}` / `${file:}` references are in the JSON "
        "Schema (`syncd schema`). A key without a default and not required takes the "
        "runtime's value, given in its description.",
        "A path, wherever one names a place in a response or a record (`records`, "
        "`id_field`, cursors, end signals, `incremental`, `hash_fields`, the document "
        "shape), is dotted or a JSON Pointer. Dotted: non-empty parts joined by dots, each "
        "an object's key or an array's index (`data.items`, `items.0.id`). JSON Pointer "
        "(RFC 6901): it starts with `/` and names any key, dots, `@`, `$` and spaces "
        "included (`/@odata.nextLink`, `/data/0/id`); in a part, `~1` stands for `/` and "
        "`~0` for `~` (`/a~1b` is the key `a/b`).",
    ]
    for section in sections:
        out.append(_render(section, anchors, about))
    return "\n\n".join(out) + "\n"


def _sections(schema: Schema, defs: dict[str, Schema]) -> Iterator[_Section]:
    """The connector and the models its own keys reach, then each source kind and what it
    reaches, then each indexer kind."""
    seen: set[str] = set()
    yield _Section("Connector file", "", schema)
    props = schema.get("properties", {})
    own = {k: v for k, v in props.items() if k not in ("source", "indexer")}
    yield from _nested({"properties": own}, defs, seen)  # `document`
    for key, what in (("source", "Source"), ("indexer", "Indexer")):
        for name in _refs(props.get(key, {})):
            if name in seen:
                continue
            seen.add(name)
            yield _Section(f"{what} `{_tag(defs[name]) or name}`", name, defs[name])
            yield from _nested(defs[name], defs, seen)


def _nested(model: Schema, defs: dict[str, Schema], seen: set[str]) -> Iterator[_Section]:
    """The models ``model``'s keys refer to, each titled by the key (and its ``type``)."""
    for key, prop in model.get("properties", {}).items():
        for name in _refs(prop):
            if name in seen:
                continue
            seen.add(name)
            tag = _tag(defs[name])
            heading = f"{key.replace('_', ' ').capitalize()} `{tag}`" if tag else f"`{key}`"
            yield _Section(heading, name, defs[name])
            yield from _nested(defs[name], defs, seen)


def _refs(schema: Schema) -> list[str]:
    """The ``$defs`` names ``schema`` refers to, in order (through unions and items)."""
    if "$ref" in schema:
        ref: str = schema["$ref"]
        return [ref.removeprefix(_REF)] if ref.startswith(_REF) else []
    found: list[str] = []
    for key in ("anyOf", "oneOf"):
        for member in schema.get(key, []):
            found.extend(_refs(member))
    for key in ("items", "additionalProperties"):
        if isinstance(schema.get(key), dict):
            found.extend(_refs(schema[key]))
    return found


def _tag(model: Schema) -> str | None:
    """The ``type`` a model's objects carry (its ``const``), if it has one."""
    const = model.get("properties", {}).get("type", {}).get("const")
    return const if isinstance(const, str) else None


# --- one section --------------------------------------------------------------------------


def _render(section: _Section, anchors: dict[str, str], about: dict[str, str]) -> str:
    """The heading, description, table of keys and example of one model."""
    schema = section.schema
    lines = [f"### {section.heading}", ""]
    intro = _text(schema.get("description", ""))
    if section.name:
        intro = f"`{section.name}`: {intro}" if intro else f"`{section.name}`."
    if intro:
        lines += [intro, ""]
    props: dict[str, Schema] = schema.get("properties", {})
    required = set(schema.get("required", []))
    if props:
        lines.append(_HEAD)
        for key, prop in props.items():
            cells = (
                f"`{key}`",
                _type(prop, anchors),
                "**required**" if key in required else _default(prop),
                _range(prop) or _NONE,
                _cell(_description(prop, about)) or _NONE,
                _example(prop),
            )
            lines.append("| " + " | ".join(cells) + " |")
    if schema.get("additionalProperties") not in (False, None):
        lines += ["", "Other keys are accepted as they are (checked by the kind itself)."]
    for example in schema.get("examples", [])[:1]:
        lines += ["", "```json", json.dumps(example, indent=2, ensure_ascii=False), "```"]
    return "\n".join(lines)


def _type(schema: Schema, anchors: dict[str, str]) -> str:
    """``schema``'s type in words: links to the models it refers to, ``a \\| b`` unions."""
    if "$ref" in schema:
        name = str(schema["$ref"]).removeprefix(_REF)
        return f"[`{name}`]({anchors[name]})" if name in anchors else f"`{name}`"
    if "const" in schema:
        return f"`{_json(schema['const'])}`"
    if "enum" in schema:
        return r" \| ".join(f"`{_json(v)}`" for v in schema["enum"])
    for key in ("anyOf", "oneOf"):
        if key in schema:
            return r" \| ".join(_type(member, anchors) for member in schema[key])
    kind = schema.get("type")
    if isinstance(kind, list):
        return r" \| ".join(kind)
    if kind == "array" and isinstance(schema.get("items"), dict):
        return f"array of {_grouped(_type(schema['items'], anchors))}"
    if kind == "object" and schema.get("additionalProperties"):  # not {} (any value)
        return f"object of {_grouped(_type(schema['additionalProperties'], anchors))}"
    return str(kind) if kind else "any"


def _description(schema: Schema, about: dict[str, str]) -> str:
    """The key's description, else that of the one model it holds."""
    if "description" in schema:
        return _text(schema["description"])
    refs = _refs(schema)
    return about.get(refs[0], "") if len(refs) == 1 else ""


def _grouped(text: str) -> str:
    return f"({text})" if r"\|" in text else text


def _default(schema: Schema) -> str:
    return f"`{_cell(_json(schema['default']))}`" if "default" in schema else _NONE


def _range(schema: Schema) -> str:
    """Numeric bounds, lengths and item bounds of ``schema`` (or of its non-null member)."""
    members = [m for m in schema.get("anyOf", []) if m.get("type") != "null"]
    if len(members) == 1:
        return _range(members[0])
    parts: list[str] = []
    low, high = schema.get("minimum"), schema.get("maximum")
    if low is not None and high is not None:
        parts.append(f"{_json(low)}{_TO}{_json(high)}")
    else:
        if low is not None:
            parts.append(f"≥ {_json(low)}")
        if high is not None:
            parts.append(f"≤ {_json(high)}")
    if "exclusiveMinimum" in schema:
        parts.insert(0, f"> {_json(schema['exclusiveMinimum'])}")
    if "exclusiveMaximum" in schema:
        parts.append(f"< {_json(schema['exclusiveMaximum'])}")
    for key, words in (("minLength", "length ≥ {}"), ("maxLength", "length ≤ {}")):
        if key in schema:
            parts.append(words.format(schema[key]))
    fewest, most = schema.get("minItems"), schema.get("maxItems")
    if fewest is not None or most is not None:
        parts.append(
            f"{fewest}{_TO}{most} items"
            if fewest is not None and most is not None
            else f"≥ {fewest} items"
            if fewest is not None
            else f"≤ {most} items"
        )
    if isinstance(schema.get("items"), dict) and (each := _range(schema["items"])):
        parts.append(f"each {each}")
    return ", ".join(parts)


def _example(schema: Schema) -> str:
    examples = schema.get("examples") or []
    return f"`{_cell(_json(examples[0]))}`" if examples else _NONE


def _json(value: Any) -> str:
    if isinstance(value, float) and value.is_integer():
        return f"{value:.1f}"
    return json.dumps(value, ensure_ascii=False, separators=(", ", ": "))


def _text(text: str) -> str:
    """A docstring or description as one Markdown line (reST ````x```` → ```x```)."""
    return " ".join(text.replace("``", "`").split())


def _cell(text: str) -> str:
    return text.replace("|", r"\|")


# --- the reference file ---------------------------------------------------------------


def between_markers(text: str) -> str:
    """The text between :data:`START` and :data:`END` (without the blank lines next to the
    markers); ``ValueError`` when they are not there once each, in order."""
    start, end = _markers(text)
    return text[start + len(START) : end].strip("\n")


def replace_between_markers(text: str, reference: str) -> str:
    """``text`` with what lies between the markers replaced by ``reference``."""
    start, end = _markers(text)
    return f"{text[: start + len(START)]}\n\n{reference.strip()}\n\n{text[end:]}"


def _markers(text: str) -> tuple[int, int]:
    if text.count(START) != 1 or text.count(END) != 1:
        raise ValueError(f"expected {START} and {END} once each")
    start, end = text.index(START), text.index(END)
    if end < start:
        raise ValueError(f"{END} comes before {START}")
    return start, end


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m syncd.cli.reference [--write FILE]``."""
    parser = argparse.ArgumentParser(
        prog="python -m syncd.cli.reference", description=__doc__.splitlines()[0]
    )
    parser.add_argument(
        "--write",
        metavar="FILE",
        type=Path,
        help=f"replace the text between {START} and {END} in FILE instead of printing",
    )
    args = parser.parse_args(argv)
    reference = render_reference(Registry.builtin())
    if args.write is None:
        sys.stdout.write(reference)
        return 0
    path: Path = args.write
    try:
        text = path.read_text(encoding="utf-8")
        path.write_text(replace_between_markers(text, reference), encoding="utf-8")
    except (OSError, ValueError) as exc:
        print(f"{path}: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
