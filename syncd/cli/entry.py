"""The ``syncd`` command: run the daemon, or drive a running one over its control API.

Exit codes: 0 success; 1 the API refused the request (or a followed sync did not succeed, or
a preview's source failed); 2 bad usage or configuration, or an invalid connector file
(``validate``, ``edit``); 3 the daemon could not be reached; 130 interrupted (Ctrl-C).
With ``--json`` an error is also written to stdout as ``{"error": {...}}`` (same exit code).

The configuration (where the daemon listens, its token) is found the same way by ``run`` and
every client command: ``--config``, else ``$SYNCD_CONFIG``, else ``./config.toml`` when it
exists, else the built-in defaults.

Connector files (``create``, ``update``, ``validate``, ``preview``) are YAML or JSON: by the
extension (``.yaml``/``.yml``/``.json``), else (``-`` for stdin, any other name) by content:
JSON when it starts with ``{``, YAML otherwise. YAML is read with ``yaml.safe_load``; it must
hold only what JSON can (string keys, no dates: quote them, finite numbers).

This module is the entry point and the commands that need no daemon; the client commands
are in :mod:`syncd.cli.commands`, what every command shares in :mod:`syncd.cli.io`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TextIO

from syncd.cli import edit as cliedit
from syncd.cli.client import ApiError, Client, DaemonUnreachable, url_from_listen
from syncd.cli.commands import COMMANDS, edit
from syncd.cli.files import ConnectorFileError, load_connector_file
from syncd.cli.io import (
    EXIT_API,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_UNREACHABLE,
    EXIT_USAGE,
    Failure,
    Streams,
    UsageError,
)
from syncd.cli.parser import build_parser
from syncd.config.loader import Config
from syncd.errors import ConfigError

__all__ = [
    "EXIT_API",
    "EXIT_OK",
    "EXIT_UNREACHABLE",
    "EXIT_USAGE",
    "Streams",
    "build_parser",
    "execute",
    "main",
]


DEFAULT_CONFIG = "config.toml"  # looked for in the working directory, by every command


# --- entry points ---------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    """The console entry point: parse ``argv`` and run the command; the exit code."""
    args = build_parser().parse_args(argv)
    streams = Streams(sys.stdin, sys.stdout, sys.stderr)
    if args.command == "run":
        return _run_daemon(args, streams.stderr, os.environ)
    if args.command == "validate":
        return validate(args, streams, os.environ)
    if args.command == "schema":
        return print_schema(streams)
    if args.command == "init":
        return init(args, streams, os.environ)
    if args.command == "completion":
        return completion(args, streams)
    try:
        return asyncio.run(execute(args, streams=streams, environ=os.environ))
    except KeyboardInterrupt:
        # `sync --follow` has said that its run goes on: "interrupted" (a run outcome's
        # name) would say the opposite.
        if not (args.command == "sync" and args.follow):
            streams.stderr.write("interrupted\n")
        return EXIT_INTERRUPTED


def config_path(args: argparse.Namespace, environ: Mapping[str, str]) -> str | None:
    """The ``--config`` every command passes to ``Config.load``: the option, else (unless
    ``$SYNCD_CONFIG`` names a file, which ``Config.load`` reads itself) ``./config.toml``
    when it exists — what ``syncd init`` writes — else none (built-in defaults)."""
    path: str | None = getattr(args, "config", None) or None
    if path is None and not environ.get("SYNCD_CONFIG") and os.path.isfile(DEFAULT_CONFIG):
        path = DEFAULT_CONFIG
    return path


def completion(args: argparse.Namespace, io: Streams) -> int:
    """``syncd completion bash|zsh``: the completion script, generated from the parser."""
    import shtab

    script = shtab.complete(build_parser(), shell=args.shell)
    io.stdout.write(script if script.endswith("\n") else script + "\n")
    return EXIT_OK


def init(args: argparse.Namespace, io: Streams, environ: Mapping[str, str]) -> int:
    """``syncd init``: write the shipped example configuration (and units) to start from;
    refuses (exit 2) to overwrite anything without ``--force``."""
    from syncd import data

    config = Path(args.config or environ.get("SYNCD_CONFIG") or data.CONFIG)
    systemd_dir = None if args.systemd is None else Path(args.systemd)
    try:
        written = data.write_examples(data.plan(config, systemd_dir), force=args.force)
    except OSError as exc:
        io.stderr.write(f"error: {exc}\n")
        return EXIT_USAGE
    io.stdout.write("".join(f"wrote {path}\n" for path in written))
    return EXIT_OK


def _run_daemon(args: argparse.Namespace, stderr: TextIO, environ: Mapping[str, str]) -> int:
    args.config = config_path(args, environ)
    try:
        config = Config.load(args.config, environ=environ)
    except ConfigError as exc:
        stderr.write(f"error: {_config_message(exc, args.config, environ)}\n")
        return EXIT_USAGE
    # Imported here: the client commands need none of the daemon's machinery.
    from syncd.daemon.runner import run_service

    try:
        return asyncio.run(run_service(config))
    except ConfigError as exc:  # e.g. the API refusing its listen address
        stderr.write(f"error: {_config_message(exc, args.config, environ)}\n")
        return EXIT_USAGE


def _config_message(exc: ConfigError, path: str | None, environ: Mapping[str, str]) -> str:
    """``exc`` prefixed with the file it is about, when that is not already said."""
    path = path or environ.get("SYNCD_CONFIG") or None
    if path is None or exc.key.startswith("SYNCD_") or exc.key == str(Path(path)):
        return str(exc)
    return f"{path}: {exc}"


async def execute(
    args: argparse.Namespace,
    *,
    streams: Streams,
    environ: Mapping[str, str] = os.environ,
) -> int:
    """Run a client command (everything but ``run``) against the daemon; the exit code."""
    failed = Failure(streams, json_mode=bool(getattr(args, "json", False)))
    args.config = config_path(args, environ)
    try:
        url, token = _connection(args, environ)
        async with Client(url, token=token) as api:
            if args.command == "edit":
                return await edit(api, args, streams, environ)
            return await COMMANDS[args.command](api, args, streams)
    except ConfigError as exc:
        return failed("config", EXIT_USAGE, _config_message(exc, args.config, environ))
    except (UsageError, ConnectorFileError) as exc:
        return failed("usage", EXIT_USAGE, str(exc))
    except cliedit.EditError as exc:
        code = failed("invalid", EXIT_USAGE, str(exc))
        if exc.kept is not None:
            cliedit.kept_hint(exc.kept, streams.stderr)
        return code
    except ApiError as exc:
        hint = "pass --token or set SYNCD_API_TOKEN" if exc.status == 401 else None
        return failed("api", EXIT_API, str(exc), hint=hint, api=exc)
    except DaemonUnreachable as exc:
        hint = "is the daemon running? (syncd run)"
        return failed("unreachable", EXIT_UNREACHABLE, str(exc), hint=hint)


def _connection(args: argparse.Namespace, environ: Mapping[str, str]) -> tuple[str, str | None]:
    """The daemon URL and token: options, then environment, then the configuration."""
    url: str | None = args.url or environ.get("SYNCD_URL") or None
    token: str | None = args.token or environ.get("SYNCD_API_TOKEN") or None
    has_file = bool(args.config or environ.get("SYNCD_CONFIG"))
    if url is None or (token is None and has_file):
        env = dict(environ)
        if token is not None:
            # A token given here overrides the file's, so an unreadable token_file is moot.
            env["SYNCD_API_TOKEN"] = token
            env.pop("SYNCD_API_TOKEN_FILE", None)
        config = Config.load(args.config, environ=env)
        url = url or url_from_listen(config.api.listen)
        token = token or config.api.token
    try:
        Client(url)  # validates the URL's shape before anything is sent
    except ValueError as exc:
        raise UsageError(f"--url: {exc}") from None
    return url, token


# --- connector files ------------------------------------------------------------------


def print_schema(io: Streams) -> int:
    """``syncd schema``: the JSON Schema of a connector file, with the kinds installed here
    (built-in and entry-point plugins)."""
    from syncd.plugins import Registry
    from syncd.schema import connector_file_schema

    kinds = Registry.builtin()
    kinds.load_entry_points()
    io.stdout.write(json.dumps(connector_file_schema(kinds), indent=2) + "\n")
    return EXIT_OK


def validate(args: argparse.Namespace, io: Streams, environ: Mapping[str, str]) -> int:
    """``syncd validate FILE``: the API's checks of a create body, offline. Prints ``valid``
    (exit 0) or one ``path: message`` line per error (exit 2).

    With ``--connect``, a valid file's indexer target is then reached through its kind's
    check (:mod:`syncd.cli.connect`): each problem is an ``indexer: …`` line (exit 2, no
    ``valid``); without any, ``valid`` and a line saying what was reached (exit 0)."""
    # Imported here: only this command needs the kinds (and the http source they pull in).
    from syncd.errors import ValidationError
    from syncd.plugins import Registry
    from syncd.schema.spec import parse_create

    args.config = config_path(args, environ)
    try:
        # The daemon's paginator defaults, which a create without those keys gets.
        config = Config.load(args.config, environ=environ)
        defaults = config.sync.paginator
        body = load_connector_file(args.file, io.stdin)
    except ConfigError as exc:
        io.stderr.write(f"error: {_config_message(exc, args.config, environ)}\n")
        return EXIT_USAGE
    except (UsageError, ConnectorFileError) as exc:
        io.stderr.write(f"error: {exc}\n")
        return EXIT_USAGE
    kinds = Registry.builtin()
    kinds.load_entry_points()
    try:
        fields = parse_create(body, defaults=defaults, kinds=kinds)
    except ValidationError as exc:
        io.stdout.write("".join(f"{path}: {msg}\n" for path, msg in exc.errors.items()))
        return EXIT_USAGE
    notes: list[str] = []
    if args.connect:
        from syncd.cli.connect import reach_indexer

        try:
            problems, notes = asyncio.run(
                reach_indexer(config, kinds, fields["indexer"], stderr=io.stderr)
            )
        except KeyboardInterrupt:
            io.stderr.write("interrupted\n")
            return EXIT_INTERRUPTED
        if problems:
            io.stdout.write("".join(f"{line}\n" for line in problems))
            return EXIT_USAGE
    io.stdout.write("".join(f"{line}\n" for line in ["valid", *notes]))
    return EXIT_OK
