"""The ``syncd`` command line's parser: every command, its options and their checks."""

from __future__ import annotations

import argparse
import json
import re

from syncd.cli.follow import FOLLOW_INTERVAL
from syncd.models import ConnectorStatus, DocStatus
from syncd.version import VERSION

_ID_HELP = "connector id or name"
_FILE_HELP = "connector file, YAML or JSON ('-' for stdin)"
PREVIEW_TIMEOUT = 10.0  # the API's default time limit of a preview, in seconds


def build_parser() -> argparse.ArgumentParser:
    """The ``syncd`` argument parser."""
    parser = argparse.ArgumentParser(
        prog="syncd",
        description="Keep cursor-paginated sources in sync with an indexer.",
        epilog="Exit codes: 0 ok, 1 request refused, sync not successful or preview source "
        "failed, 2 usage or configuration error or invalid connector file, "
        "3 daemon unreachable, 130 interrupted.",
    )
    parser.add_argument("--version", action="version", version=f"syncd {VERSION}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    config_opt = argparse.ArgumentParser(add_help=False)
    config_opt.add_argument(
        "--config",
        metavar="PATH",
        help="configuration file (default: $SYNCD_CONFIG, else ./config.toml if it exists, "
        "else built-in defaults)",
    )
    client = argparse.ArgumentParser(add_help=False, parents=[config_opt])
    group = client.add_argument_group("connection")
    group.add_argument(
        "--url",
        help="daemon URL: http://host:port or unix:/path "
        "(default: $SYNCD_URL, else the configuration's api.listen)",
    )
    group.add_argument(
        "--token", help="API bearer token (default: $SYNCD_API_TOKEN, else the configuration's)"
    )
    client.add_argument(
        "--json",
        action="store_true",
        help='print the API\'s JSON answer (an error as {"error": {...}}, same exit code)',
    )
    paged = argparse.ArgumentParser(add_help=False)
    paged.add_argument("--limit", type=_positive_int, help="at most this many items")
    paged.add_argument("--cursor", help="continue from a previous page's next cursor")

    def command(
        name: str, help_: str, *parents: argparse.ArgumentParser
    ) -> argparse.ArgumentParser:
        return sub.add_parser(name, help=help_, description=help_, parents=list(parents))

    command("run", "run the daemon until SIGTERM/SIGINT", config_opt)
    p = command("init", "write the example configuration (and with --systemd, the systemd units)")
    p.add_argument(
        "--config",
        metavar="PATH",
        help="where to write the configuration (default: $SYNCD_CONFIG, else ./config.toml)",
    )
    p.add_argument(
        "--systemd",
        metavar="DIR",
        help="also write syncd.service, syncd.socket and syncd.env.example into DIR",
    )
    p.add_argument("--force", action="store_true", help="overwrite files that exist")
    p = command("list", "list connectors", client, paged)
    p.add_argument("--status", choices=[s.value for s in ConnectorStatus])
    command("show", "show one connector", client).add_argument(
        "connector", metavar="ID", help=_ID_HELP
    )
    p = command("create", "create a connector from a YAML or JSON file", client)
    p.add_argument("file", metavar="FILE", help=_FILE_HELP)
    p = command("update", "change a connector: PATCH it with a YAML or JSON file's keys", client)
    p.add_argument("connector", metavar="ID", help=_ID_HELP)
    p.add_argument("file", metavar="FILE", help=_FILE_HELP)
    p = command(
        "edit",
        "change a connector in $VISUAL/$EDITOR (YAML): the keys changed are sent in one "
        "PATCH, which the daemon checks before saving anything (exit 2 if invalid)",
        client,
    )
    p.add_argument("connector", metavar="ID", help=_ID_HELP)
    p = command(
        "validate",
        "check a connector file as the API would, offline (exit 2 and one error per line "
        "if invalid)",
        config_opt,
    )
    p.add_argument("file", metavar="FILE", help=_FILE_HELP)
    p.add_argument(
        "--connect",
        action="store_true",
        help="also reach the indexer's target as the daemon would (its check, writing "
        "nothing): exit 2 and one line per problem found",
    )
    command(
        "schema",
        "print the JSON Schema of a connector file (for editors: completion and checking)",
        config_opt,
    )
    p = command(
        "preview",
        "fetch the first pages of a connector file or an existing connector, storing nothing",
        client,
    )
    p.add_argument(
        "target",
        metavar="FILE|ID",
        help="a connector file ('-' for stdin); a name that is not a file is a connector's "
        "id or name",
    )
    p.add_argument(
        "--pages", type=_page_count, default=1, metavar="N", help="pages to fetch, 1-10 (default 1)"
    )
    p.add_argument(
        "--timeout",
        type=_positive_float,
        metavar="SECONDS",
        help=f"time limit, 1-60 seconds (default {PREVIEW_TIMEOUT:g})",
    )
    p = command("sync", "start a sync run", client)
    p.add_argument("connector", metavar="ID", help=_ID_HELP)
    crawl = p.add_mutually_exclusive_group()
    crawl.add_argument(
        "--full",
        action="store_true",
        help="a full crawl: everything, ignoring the mark; it deletes what it did not see "
        "and sets the mark",
    )
    crawl.add_argument(
        "--backfill",
        type=_window,
        metavar="SINCE[..UNTIL]",
        help="crawl only the window [SINCE, UNTIL) of the incremental field: it never deletes "
        "and never moves the mark",
    )
    p.add_argument("--follow", "-f", action="store_true", help="show progress until it ends")
    p.add_argument(
        "--interval",
        type=_positive_float,
        default=FOLLOW_INTERVAL,
        metavar="SECONDS",
        help=f"with --follow: seconds between progress polls (default {FOLLOW_INTERVAL})",
    )
    p = command(
        "state",
        "show a connector's crawl state (its mark, the crawl in progress, the next crawl), "
        "or set or reset the mark",
        client,
    )
    p.add_argument("connector", metavar="ID", help=_ID_HELP)
    change = p.add_mutually_exclusive_group()
    change.add_argument(
        "--set",
        type=mark_value,
        metavar="VALUE",
        help="the mark the next incremental crawl starts from, as the records hold the field "
        "(a number stays a number: quote it as JSON, '\"42\"', for text)",
    )
    change.add_argument(
        "--reset", action="store_true", help="forget the mark: the next crawl is a full one"
    )
    for name, help_ in (
        ("abort", "abort the running sync"),
        ("pause", "pause a connector (no scheduled or manual syncs)"),
        ("resume", "resume a paused connector"),
        ("delete", "delete a connector, its documents and its runs"),
        ("retry-failed", "re-queue a connector's failed documents"),
    ):
        command(name, help_, client).add_argument("connector", metavar="ID", help=_ID_HELP)
    p = command("deletions", "deletions held by the guard of a completed crawl")
    actions = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    help_ = "delete the documents the guard held (gone at the source)"
    p = actions.add_parser("apply", help=help_, description=help_, parents=[client])
    p.add_argument("connector", metavar="ID", help=_ID_HELP)
    p = command("runs", "list a connector's sync runs, newest first", client, paged)
    p.add_argument("connector", metavar="ID", help=_ID_HELP)
    p = command("documents", "list a connector's documents", client, paged)
    p.add_argument("connector", metavar="ID", help=_ID_HELP)
    p.add_argument("--status", choices=[s.value for s in DocStatus])
    p = command("document", "show one document of a connector, with its payload", client)
    p.add_argument("connector", metavar="ID", help=_ID_HELP)
    p.add_argument("external_id", metavar="EXTERNAL_ID", help="the document's external id")
    command("status", "the daemon: version, instances, workers, queue and running syncs", client)
    p = command(
        "completion",
        'print a shell completion script: eval "$(syncd completion bash)" in ~/.bashrc, or '
        "syncd completion zsh > a directory of $fpath as _syncd",
    )
    p.add_argument("shell", choices=sorted(_COMPLETION_SHELLS))
    _complete_paths(parser)
    return parser


_COMPLETION_SHELLS = frozenset({"bash", "zsh"})


def _complete_paths(parser: argparse.ArgumentParser) -> None:
    """Mark the arguments that name files (or a directory) for the completion scripts."""
    import shtab

    for action in parser._actions:  # argparse has no public walk of its tree
        if isinstance(action, argparse._SubParsersAction):
            for sub in dict.fromkeys(action.choices.values()):
                _complete_paths(sub)
        elif action.dest in ("file", "target", "config"):
            action.complete = shtab.FILE  # type: ignore[attr-defined]
        elif action.dest == "systemd":
            action.complete = shtab.DIRECTORY  # type: ignore[attr-defined]


def mark_value(text: str) -> str | int | float:
    """A mark or a window bound as typed: a JSON number is a number, JSON text (quoted) is
    text, anything else is the text itself."""
    if _NUMBER.fullmatch(text) or (text.startswith('"') and text.endswith('"') and len(text) > 1):
        try:
            value = json.loads(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a JSON number or string: {text!r}") from None
        if isinstance(value, str | int | float) and not isinstance(value, bool):
            return value
    if not text:
        raise argparse.ArgumentTypeError("expected a value, got nothing")
    return text


def _window(text: str) -> tuple[str | int | float, str | int | float | None]:
    """``SINCE`` or ``SINCE..UNTIL``."""
    since, dots, until = text.partition("..")
    if not since or (dots and not until):
        raise argparse.ArgumentTypeError(f"expected SINCE or SINCE..UNTIL, got {text!r}")
    return mark_value(since), mark_value(until) if dots else None


_NUMBER = re.compile(r"-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?")


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def _page_count(text: str) -> int:
    value = _positive_int(text)
    if value > 10:
        raise argparse.ArgumentTypeError(f"expected 1 to 10 pages, got {text!r}")
    return value


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}")
    return value
