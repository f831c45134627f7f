"""What ``collective/ulfm.py`` says of the MPI these suites run on (every MPI of CI).

MPICH through mpi4py has no ULFM: nothing may read as a process failure there (its error
classes all equal ``ERR_UNKNOWN``), whatever the environment says. Open MPI has it, switched on
only by ``mpiexec --with-ft ulfm`` (these suites are launched without it). The failure path
itself, a rank killed and the survivors going on, is ``tests/e2e/test_shrink.py``.
"""

from __future__ import annotations

import pytest

from mwms_mpi._mpi import mpi
from mwms_mpi.collective import ulfm

pytestmark = pytest.mark.mpi


def test_process_failures_are_told_apart_only_where_the_library_has_ulfm() -> None:
    MPI = mpi()
    has = ulfm.library_has_ulfm(MPI)
    assert has == (MPI.get_vendor()[0] == "Open MPI"), MPI.get_vendor()
    for error_class in (MPI.ERR_PROC_FAILED, MPI.ERR_REVOKED):
        assert ulfm.is_process_failure(MPI, MPI.Exception(error_class)) == has
    for error_class in (MPI.ERR_UNKNOWN, MPI.ERR_OTHER, MPI.ERR_TRUNCATE):
        assert not ulfm.is_process_failure(MPI, MPI.Exception(error_class))
    assert not ulfm.is_process_failure(MPI, RuntimeError("not MPI's"))


def test_only_the_launchers_switch_turns_it_on() -> None:
    MPI = mpi()
    has = ulfm.library_has_ulfm(MPI)
    assert not ulfm.enabled(MPI, {})
    assert ulfm.enabled(MPI, {ulfm.FT_ENABLE_ENV: "1"}) == has
    assert not ulfm.enabled(MPI, {ulfm.FT_ENABLE_ENV: "0"})
    line = ulfm.describe(MPI, {})
    if has:
        assert line.startswith("no: this MPI has ULFM, but") and "--with-ft ulfm" in line, line
        assert ulfm.describe(MPI, {ulfm.FT_ENABLE_ENV: "true"}).startswith("yes: ULFM is on")
    else:
        assert line.startswith("no: this MPI has no working ULFM"), line
