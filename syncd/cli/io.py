"""What every ``syncd`` command shares: the exit codes, the streams it reads and writes, how
it reports an error, and how it prints JSON or a page of rows."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TextIO

from syncd.cli.client import ApiError
from syncd.cli.format import render_table

EXIT_OK = 0
EXIT_API = 1
EXIT_USAGE = 2
EXIT_UNREACHABLE = 3
EXIT_INTERRUPTED = 130


class UsageError(Exception):
    """A command-line input that cannot be used (unreadable or invalid file): exit 2."""


@dataclass(frozen=True)
class Streams:
    """Where a command reads and writes; the process's own streams unless a test says."""

    stdin: TextIO
    stdout: TextIO
    stderr: TextIO


@dataclass(frozen=True)
class Failure:
    """How a client command reports an error: ``error:`` lines on stderr (a validation
    error's fields one per line), and with ``--json`` also one JSON object on stdout:
    ``{"error": {"kind", "message", "exit_code"[, "status", "detail", "problems", "body"]}}``
    (an API error's ``status``, ``detail`` and the API's own JSON ``body``)."""

    io: Streams
    json_mode: bool

    def __call__(
        self,
        kind: str,
        code: int,
        message: str,
        *,
        hint: str | None = None,
        api: ApiError | None = None,
    ) -> int:
        err = self.io.stderr
        if api is not None and api.problems:  # a validation error: one line per field
            err.write("".join(f"error: {api.status} {line}\n" for line in api.problems))
        else:
            err.write("".join(f"error: {line}\n" for line in message.splitlines()))
        if hint is not None:
            err.write(f"hint: {hint}\n")
        if self.json_mode:
            error: dict[str, Any] = {"kind": kind, "message": message, "exit_code": code}
            if api is not None:
                error.update(status=api.status, detail=api.detail)
                if api.problems:
                    error["problems"] = list(api.problems)
                if api.body is not None:
                    error["body"] = api.body
            print_json(self.io, {"error": error})
        return code


def print_json(io: Streams, value: Any) -> int:
    """``value`` as indented JSON on stdout; exit 0."""
    io.stdout.write(json.dumps(value, indent=2, ensure_ascii=False) + "\n")
    return EXIT_OK


def print_page(
    io: Streams, headers: list[str], rows: list[list[Any]], page: Mapping[str, Any], noun: str
) -> None:
    """A table of ``rows`` (or "no NOUN" on stderr), and the option that shows the next page."""
    if rows:
        io.stdout.write(render_table(headers, rows))
    else:
        io.stderr.write(f"no {noun}\n")
    if page.get("next_cursor"):
        io.stderr.write(f"more {noun}: add --cursor {page['next_cursor']}\n")
