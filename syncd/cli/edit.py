"""``syncd edit ID``: a connector's settings in ``$VISUAL``/``$EDITOR``, saved with one PATCH.

The editor gets the connector's editable keys as YAML. When it exits, the file is read back
and the keys whose value changed are sent as one ``PATCH /connectors/{id}``: the daemon
validates the whole change before it saves anything (it knows its plugins, which this
machine may not), so an invalid edit changes nothing. Whatever goes wrong after the editor
ran, the edited file is kept and its path printed, so no typing is lost.

Secrets: the API shows them as ``"***"``. A ``source`` or ``indexer`` left as it was is not
sent; a changed one that still holds ``"***"`` is refused (sending it would overwrite the
secret with the mask): write the value, or better a ``${env:NAME}`` / ``${file:/path}``
reference.
"""

from __future__ import annotations

import asyncio
import os
import shlex
import subprocess
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, TextIO

import yaml

from syncd.cli.files import ConnectorFileError, parse_connector_text
from syncd.observability.logs import MASK

# The keys a PATCH may change, in the order the file shows them. `status` is left to
# `pause`/`resume`; read-only fields (id, run state, counts) are not shown.
EDITABLE = (
    "name",
    "source",
    "indexer",
    "sync_schedule",
    "sync_timezone",
    "full_crawl_schedule",
    "page_retries",
    "page_retry_backoff",
    "throttle_seconds",
    "retry_on_status",
    "retry_attempts",
    "retry_backoff",
    "hash_fields",
    "document",
    "prune",
    "prune_max_fraction",
    "prune_confirmations",
)

_HEADER = """\
# Edit connector {name} ({id}): save and quit to apply; an empty file cancels.
# Only the keys you change are sent (one PATCH); the daemon checks them before saving.
# Secrets are shown as "***": to change a source or indexer that holds one, write the
# value again (or a ${{env:NAME}} / ${{file:/path}} reference).
# Set a key to null to clear it; a key you delete is left as it is.
"""


class EditError(Exception):
    """The edit cannot be sent (editor failed, unreadable or masked content): exit 2.
    ``kept`` is the edited file, left in place."""

    def __init__(self, message: str, kept: Path | None = None) -> None:
        super().__init__(message)
        self.kept = kept


def editable(connector: Mapping[str, Any]) -> dict[str, Any]:
    """The keys of ``connector`` that ``edit`` offers, in :data:`EDITABLE` order."""
    return {k: connector[k] for k in EDITABLE if k in connector}


def render(connector: Mapping[str, Any]) -> str:
    """The text the editor opens: a comment header, then the editable keys as YAML."""
    body = yaml.safe_dump(
        _plain(editable(connector)), sort_keys=False, allow_unicode=True, width=100
    )
    return _HEADER.format(name=connector.get("name"), id=connector.get("id")) + body


def changes(before: Mapping[str, Any], edited: Any, kept: Path) -> dict[str, Any]:
    """The PATCH body: the keys of ``edited`` whose value differs from ``before``.
    :class:`EditError` for content that is not a mapping or still holds a mask where it
    would be sent."""
    if not isinstance(edited, Mapping):
        raise EditError("the edited file must hold a mapping of connector keys", kept)
    order = {k: i for i, k in enumerate(EDITABLE)}
    changed = [k for k, v in edited.items() if k not in before or before[k] != v]
    patch = {k: edited[k] for k in sorted(changed, key=lambda k: order.get(k, len(order)))}
    masked = [
        path for key in ("source", "indexer") if key in patch for path in _masked(patch[key], key)
    ]
    if masked:
        raise EditError(
            "\n".join(
                f'{path}: still masked ("{MASK}"): write the secret or a ${{env:NAME}} reference'
                for path in masked
            ),
            kept,
        )
    return patch


def run_editor(path: Path, environ: Mapping[str, str]) -> None:
    """Open ``$VISUAL``, else ``$EDITOR``, else ``vi`` on ``path`` and wait for it.
    The variable may carry arguments (``code --wait``)."""
    command = environ.get("VISUAL") or environ.get("EDITOR") or "vi"
    argv = [*shlex.split(command), str(path)]
    try:
        result = subprocess.run(argv, check=False, env=dict(environ))
    except OSError as exc:
        raise EditError(f"cannot run the editor {command!r}: {exc.strerror or exc}") from exc
    if result.returncode != 0:
        raise EditError(f"the editor {command!r} exited with {result.returncode}", path)


async def edit_text(connector: Mapping[str, Any], environ: Mapping[str, str]) -> tuple[Any, Path]:
    """Write ``connector`` to a temporary file, let the user edit it, and return the
    parsed content (``None`` for a file left empty) and the file's path."""
    fd, name = tempfile.mkstemp(
        prefix=f"syncd-edit-{_safe(connector.get('name'))}-",
        suffix=".yaml",
        dir=environ.get("TMPDIR") or None,
    )
    path = Path(name)
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        out.write(render(connector))
    await asyncio.to_thread(run_editor, path, environ)
    try:
        text = await asyncio.to_thread(path.read_text, encoding="utf-8-sig")
    except OSError as exc:
        raise EditError(f"cannot read the edited file: {exc.strerror or exc}", path) from exc
    if not any(line.strip() and not line.lstrip().startswith("#") for line in text.splitlines()):
        return None, path
    try:
        return parse_connector_text(text, str(path), suffix=".yaml"), path
    except ConnectorFileError as exc:
        raise EditError(str(exc), path) from exc


def kept_hint(path: Path, err: TextIO) -> None:
    """Tell where the edited file was kept."""
    err.write(f"nothing saved; your edit is kept in {path}\n")


def _masked(value: Any, path: str) -> Iterator[str]:
    if value == MASK:
        yield path
    elif isinstance(value, Mapping):
        for k, v in value.items():
            yield from _masked(v, f"{path}.{k}")
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _masked(v, f"{path}.{i}")


def _plain(value: Any) -> Any:
    """JSON values as plain containers (YAML's safe dumper refuses subclasses)."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _safe(name: Any) -> str:
    """A connector name fit for a file name (editors show it)."""
    text = "".join(c if c.isalnum() or c in "-_" else "-" for c in str(name or "connector"))
    return text[:40] or "connector"
