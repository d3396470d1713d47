"""The ``syncd`` command (:func:`main`): run the daemon, or drive a running one over its
control API.

:mod:`~syncd.cli.entry` parses and dispatches, :mod:`~syncd.cli.parser` builds the argument
parser, :mod:`~syncd.cli.commands` holds the client commands and :mod:`~syncd.cli.io` what
they share; :mod:`~syncd.cli.client` is the control API's client, :mod:`~syncd.cli.files`
reads connector files, :mod:`~syncd.cli.edit` runs ``syncd edit``, :mod:`~syncd.cli.follow`
``--follow`` and :mod:`~syncd.cli.format` renders what the commands print.

The entry point's other names (``execute``, ``Streams``, ...) are imported from
:mod:`syncd.cli.entry` itself.
"""

from __future__ import annotations

from syncd.cli.entry import main

__all__ = ["main"]
