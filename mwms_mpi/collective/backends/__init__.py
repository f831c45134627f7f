"""The ordered list of collective backends; the first that supports an array wins."""

from __future__ import annotations

import types

from mwms_mpi.collective.backends.base import CollectiveBackend, select
from mwms_mpi.collective.backends.host import HostBackend


def default_backends(mpi: types.ModuleType) -> list[CollectiveBackend]:
    """The backends every communicator tries, in order (GPU backends will go before host)."""
    return [HostBackend(mpi)]


__all__ = ["CollectiveBackend", "HostBackend", "default_backends", "select"]
