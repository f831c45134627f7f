"""Another Python than the venv's (the system ``python``) gets one message saying what to run.

Before the check, ``python hello.py`` ended in a ``ModuleNotFoundError: No module named 'mpi4py'``
deep in the package, and under ``mpiexec ... python -m mwms_mpi.run`` each rank then tried to
initialise MPI to abort the job, and could not.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.launch import REPO_ROOT, run_mpi

pytestmark = pytest.mark.timeout(120)

HELLO = "import mwms_mpi\nprint('ran')\n"


@pytest.fixture
def bare_python(tmp_path: Path) -> Path:
    """A venv of the same CPython with nothing installed (no numpy, no mpi4py), which finds
    the package through PYTHONPATH, as the system python run from a checkout does."""
    venv = tmp_path / "bare"
    base = getattr(sys, "_base_executable", sys.executable)
    subprocess.run([base, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=60)
    return venv / "bin" / "python"


def _recorded_venv() -> Path:
    record = REPO_ROOT / ".mwms-mpi"
    mpi = record.read_text().strip() if record.exists() else "mpich"
    return REPO_ROOT / (".venv" if mpi == "mpich" else f".venv-{mpi}")


def test_plain_python_names_the_venv_and_the_command(tmp_path: Path, bare_python: Path) -> None:
    script = tmp_path / "hello_strategy.py"
    script.write_text(HELLO)
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    done = subprocess.run(
        [str(bare_python), str(script)], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 1, done.stderr
    assert "ran" not in done.stdout
    assert f"mwms_mpi cannot run under {bare_python}: it cannot import numpy, mpi4py" in done.stderr
    venv = _recorded_venv()
    assert f"{venv}/bin/python {script}" in done.stderr, done.stderr
    assert f"-m mwms_mpi.run {script}" in done.stderr, done.stderr
    assert "ModuleNotFoundError" not in done.stderr, done.stderr


def test_under_mpiexec_no_rank_tries_to_abort(tmp_path: Path, bare_python: Path) -> None:
    script = tmp_path / "hello_strategy.py"
    script.write_text(HELLO)
    argv = [bare_python, "-m", "mwms_mpi.run", script]
    result = run_mpi(2, argv, timeout=60, env={"PYTHONPATH": str(REPO_ROOT)})
    text = result.stdout + result.stderr
    assert result.returncode != 0, result.describe()
    # each rank that gets to print says it (prterun may end the job when the first rank exits)
    assert 1 <= text.count("mwms_mpi cannot run under") <= 2, result.describe()
    assert f"-m mwms_mpi.run {script}" in text, result.describe()
    assert "abort" not in text and "ModuleNotFoundError" not in text, result.describe()
