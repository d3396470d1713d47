"""``python -m syncd``: the same as the ``syncd`` command."""

from syncd.cli import main

raise SystemExit(main())
