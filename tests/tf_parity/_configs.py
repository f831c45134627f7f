"""Expected failures that hold in some configurations only.

``parity_tests`` takes one ``failing`` map for a file's M2 and MWMS tests; a difference that
shows at one world size only (a one-replica short-cut, a regroup that only happens with two
local replicas) must not be a strict xfail elsewhere, where the scenario passes. The run's
configuration is known when the file is imported: an MPI run sets ``MWMS_TEST_WORLD_SIZE``
(``tests/mpi/conftest.py``); the serial run, which runs the M2 tests, does not.
"""

from __future__ import annotations

import os
from collections.abc import Mapping


def current() -> str:
    """``"M2"`` in the serial run, ``"n<world size>"`` under MPI."""
    size = os.environ.get("MWMS_TEST_WORLD_SIZE")
    return "M2" if size is None else f"n{size}"


def failing_in(entries: Mapping[str, tuple[tuple[str, ...], str]]) -> dict[str, str]:
    """``scenario -> (configurations, reason)`` -> the entries for this run's configuration
    (configurations: ``"M2"``, ``"n1"``, ``"n2"``, ``"n4"``)."""
    here = current()
    return {name: reason for name, (where, reason) in entries.items() if here in where}
