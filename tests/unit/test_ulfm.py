"""What ``collective/ulfm.py`` says of this process's MPI, which is the default wheel's MPICH in
the unit tests: mpi4py switches its ULFM off, so nothing may read as a process failure (its
error classes all equal ``ERR_UNKNOWN``) whatever the environment says. Open MPI's side, where
it is on, is checked end to end by ``tests/e2e/test_shrink.py``."""

from __future__ import annotations

import pytest

from mwms_mpi._mpi import mpi
from mwms_mpi.collective import ulfm

pytestmark = pytest.mark.skipif(
    ulfm.library_has_ulfm(mpi()), reason="this MPI has ULFM: tests/e2e/test_shrink.py checks it"
)


def test_an_mpi_without_ulfm_never_reports_a_process_failure() -> None:
    MPI = mpi()
    assert not ulfm.enabled(MPI, {ulfm.FT_ENABLE_ENV: "1"})
    for error_class in (MPI.ERR_UNKNOWN, MPI.ERR_PROC_FAILED, MPI.ERR_REVOKED, MPI.ERR_OTHER):
        assert not ulfm.is_process_failure(MPI, MPI.Exception(error_class))
    assert not ulfm.is_process_failure(MPI, RuntimeError("not MPI's"))


def test_info_says_why_a_lost_rank_ends_the_job() -> None:
    line = ulfm.describe(mpi(), {})
    assert line.startswith("no: this MPI has no working ULFM"), line
