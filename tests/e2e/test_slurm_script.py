"""``scripts/slurm/run.sbatch`` checks what it will launch before launching anything.

These run everywhere (no Slurm needed): the script's own checks happen before ``srun``. The
jobs themselves are ``tests/e2e/test_slurm.py`` (``make test-slurm``).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.support.launch import REPO_ROOT

SCRIPT = REPO_ROOT / "scripts" / "slurm" / "run.sbatch"


def _run(*args: str, cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "PYTHON"))}
    base.pop("MWMS_REPO", None)
    return subprocess.run(
        ["bash", str(SCRIPT), *args],
        cwd=cwd,
        env={**base, **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_no_program_is_a_usage_error(tmp_path: Path) -> None:
    done = _run(cwd=tmp_path)
    assert done.returncode == 2 and "usage: sbatch" in done.stderr, done.stderr


def test_a_python_that_cannot_import_mwms_mpi_is_named(tmp_path: Path) -> None:
    done = _run("prog.py", cwd=tmp_path, PYTHON=str(tmp_path / "none" / "python"))
    assert done.returncode == 2, done.stderr
    assert f"PYTHON={tmp_path}/none/python cannot import mwms_mpi" in done.stderr, done.stderr
    assert "nothing was launched" in done.stderr, done.stderr


def test_the_recorded_mpis_missing_venv_says_to_make_install(tmp_path: Path) -> None:
    # a repository whose `make install MPI=system` record names a venv that is not there
    repo = tmp_path / "repo"
    (repo / "scripts" / "slurm").mkdir(parents=True)
    (repo / ".mwms-mpi").write_text("system\n")
    done = _run("prog.py", cwd=tmp_path, MWMS_REPO=str(repo))
    assert done.returncode == 2, done.stderr
    assert f"no Python with mwms_mpi at {repo}/.venv-system/bin/python" in done.stderr
    assert "MPI=system" in done.stderr and "make install" in done.stderr, done.stderr


def test_outside_slurm_it_names_the_mpiexec_command(tmp_path: Path) -> None:
    done = _run("prog.py", "--lr", "1", cwd=tmp_path, PYTHON=sys.executable)
    assert done.returncode == 2, done.stderr
    assert "not inside a Slurm job" in done.stderr, done.stderr
    assert f"mpiexec -n N {sys.executable} -m mwms_mpi.run prog.py --lr 1" in done.stderr
