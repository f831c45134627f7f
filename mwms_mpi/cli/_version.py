"""The installed distribution's version, in its own module so that the subcommands (``info``)
can show it without importing ``mwms_mpi.cli``, which imports them (no import cycle)."""

from __future__ import annotations

import importlib.metadata


def version() -> str:
    """The installed distribution's version (``unknown`` when run from a bare checkout)."""
    try:
        return importlib.metadata.version("mwms-mpi")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"
