"""syncd's version: the one place it is written (``pyproject.toml`` reads it from here, and the
package root re-exports it as ``syncd.__version__``)."""

VERSION = "0.1.0"
