"""``mwms-mpi`` (and ``python -m mwms_mpi``): info, bench and run under ``mpiexec``."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from mwms_mpi.cli.info import abort_report
from mwms_mpi.cluster.mpiexec import FAMILIES, Family
from tests.support.launch import REPO_ROOT, child_env, json_records, mpiexec, run_mpi, write_script

pytestmark = pytest.mark.timeout(180)

CLI = [sys.executable, "-m", "mwms_mpi"]


def test_info_under_mpiexec_reports_every_rank_once() -> None:
    result = run_mpi(2, [*CLI, "info", "--json"], timeout=60)
    assert result.returncode == 0, result.describe()
    (report,) = json_records(result.stdout)  # rank 0 alone prints
    job, ranks = report["job"], report["ranks"]
    assert job["library"].split()[0] in ("MPICH", "Open", "Intel(R)"), job
    assert job["thread_level"] == "MPI_THREAD_MULTIPLE"
    assert job["cuda_aware"] == "no"  # none of the PyPI wheels is, without I_MPI_OFFLOAD
    assert job["path"].endswith((".so.12", ".so.40", ".so")), job
    assert "node-local rank from $" in job["launcher"], job
    # How this job's launcher reports an abort: the text to look for in a failed job's log.
    family = mpiexec().family
    assert job["abort"] == abort_report(family) and family.abort_text in job["abort"], job
    # Only Open MPI launched with --with-ft ulfm can survive a lost rank; this launch did not
    assert job["lost_rank"].startswith("no: "), job
    assert ("--with-ft ulfm" in job["lost_rank"]) == (family.name == "openmpi"), job
    assert [r["rank"] for r in ranks] == [0, 1]
    for rank, row in enumerate(ranks):
        assert row["task"] == f"worker:{rank}" and row["replicas"] == 1, row
        assert row["node_local"] == f"{rank}/2" and row["devices"] == "CPU:0", row
        assert row["numpy_backend"] == "host"
        assert row["cupy"] == "not installed" and row["cupy_backend"] == "not installed"


def test_info_table_alone() -> None:
    done = subprocess.run(
        [*CLI, "info"], capture_output=True, text=True, timeout=60, env=child_env(), check=False
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "mwms-mpi info: 1 rank", done.stdout
    assert "launcher      none (a plain `python`: a world of one)" in done.stdout, done.stdout
    abort = next(line for line in lines if line.startswith("  abort "))
    assert mpiexec().family.abort_text in abort and "aborting rank's status" in abort, abort
    header = next(line for line in lines if line.startswith("rank "))
    assert header.split()[:7] == ["rank", "host", "Slurm", "node", "local", "task", "replicas"]
    assert lines[-1].split()[2:6] == ["-", "0/1", "worker:0", "1"], done.stdout


def test_info_names_a_size_one_world_under_a_launcher_that_started_two() -> None:
    # What `srun --mpi=none` or a foreign mpiexec does: the launcher says 2, MPI says 1.
    done = subprocess.run(
        [*CLI, "info", "--json"],
        capture_output=True,
        text=True,
        timeout=60,
        env=child_env({"SLURM_PROCID": "0", "SLURM_STEP_NUM_TASKS": "2"}),
        check=False,
    )
    assert done.returncode == 0, done.stderr
    (row,) = json.loads(done.stdout)["ranks"]
    assert "error: RuntimeError: The launcher started 2 processes" in row["devices"], row


@pytest.mark.parametrize("family", FAMILIES, ids=lambda family: family.name)
def test_abort_report_names_each_family_s_own_text(family: Family) -> None:
    # What info shows for MPICH, Intel MPI and Open MPI alike, whichever this machine runs.
    line = abort_report(family)
    assert line.startswith(f'{family.name}\'s mpiexec prints "{family.abort_text}"'), line
    assert "exits with the aborting rank's status" in line, line


@pytest.mark.mpi_neutral
def test_bench_plot(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    plot = tmp_path / "bandwidth.png"
    result = run_mpi(2, [*CLI, "bench", "--quick", "--plot", plot], timeout=150)
    assert result.returncode == 0, result.describe()
    variants = {(r["case"], r["variant"]) for r in json_records(result.stdout)}
    assert ("all_reduce float32", "all_reduce(timeline)") in variants
    assert f"plot: {plot}" in result.stdout
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and plot.stat().st_size > 10_000


def test_run_is_python_m_mwms_mpi_run(tmp_path: Path) -> None:
    script = write_script(
        tmp_path,
        "fails.py",
        """
        import sys
        from mpi4py import MPI
        # One string per rank: under PYTHONUNBUFFERED each of print's arguments is its own
        # write, and the two ranks' words interleave ("argsargs  ['--flag']").
        print(f"args {sys.argv[1:]}", flush=True)
        if MPI.COMM_WORLD.rank == 1:
            raise ValueError("only rank 1")
        MPI.COMM_WORLD.Barrier()
    """,
    )
    result = run_mpi(2, [*CLI, "run", script, "--flag"], timeout=60)
    assert result.returncode != 0, result.describe()
    assert "args ['--flag']" in result.stdout, result.describe()
    assert "[mwms_mpi.run] rank 1 of 2: uncaught ValueError, aborting the job" in result.stderr


def test_console_script_is_installed() -> None:
    script = Path(sys.executable).parent / "mwms-mpi"
    done = subprocess.run([script, "--help"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and "info" in done.stdout and "bench" in done.stdout
    assert (REPO_ROOT / "mwms_mpi" / "__main__.py").exists()
