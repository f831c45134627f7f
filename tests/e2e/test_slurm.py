"""The Slurm batch script runs the main job as one MPI world (only where Slurm is running).

Opt-in (``make test-slurm``, which sets ``MWMS_TEST_SLURM=1``): CI machines have no Slurm, and a
half-alive one (a controller whose munge daemon died) must not fail an unrelated CI run. With a
Slurm controller and an idle node (see ../shared/research/hpc_environment.md §3 for a
one-machine set-up) it submits ``scripts/slurm/train.sbatch`` with ``sbatch --wait`` and checks
the job's output.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.support.launch import REPO_ROOT

pytestmark = pytest.mark.timeout(300)


def _slurm_idle() -> bool:
    if os.environ.get("MWMS_TEST_SLURM") != "1":
        return False
    if shutil.which("sbatch") is None or shutil.which("sinfo") is None:
        return False
    try:
        states = subprocess.run(
            ["sinfo", "-h", "-o", "%T"], capture_output=True, text=True, timeout=10
        ).stdout
    except (OSError, subprocess.TimeoutExpired):
        return False
    return "idle" in states or "mix" in states


@pytest.mark.skipif(
    not _slurm_idle(),
    reason="opt-in (MWMS_TEST_SLURM=1) and needs a Slurm controller with an idle node",
)
@pytest.mark.parametrize(("mpi_type", "ok"), [("pmi2", True), ("none", False)])
def test_sbatch_runs_one_world(tmp_path: Path, mpi_type: str, ok: bool) -> None:
    out = tmp_path / "job.out"
    env = {
        "MWMS_SRUN_MPI": mpi_type,
        "CHECKPOINT_DIR": str(tmp_path / "ckpt"),
        "PATH": "/usr/bin:/bin:/usr/sbin:/sbin",
    }
    done = subprocess.run(
        [
            "sbatch",
            "--wait",
            "--ntasks=2",
            f"--output={out}",
            "scripts/slurm/train.sbatch",
            "--epochs",
            "2",
        ],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    text = out.read_text() if out.exists() else ""
    if ok:
        assert done.returncode == 0, done.stderr + text
        assert text.count("final test accuracy") == 1, text  # one world: only the chief prints
    else:  # srun without PMI starts one-rank worlds: refused, not run N times
        assert done.returncode != 0, text
        assert "MPI world has size 1" in text, text
