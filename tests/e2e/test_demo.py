"""The main job (``make demo``) trains to >= 0.9 test accuracy at 4 workers and resumes."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from tests.support.launch import REPO_ROOT, run_mpi

pytestmark = pytest.mark.timeout(300)

SCRIPT = REPO_ROOT / "scripts" / "train_digits.py"


def test_demo_trains_and_resumes(tmp_path: Path) -> None:
    ckpt = tmp_path / "ckpt"
    base = [sys.executable, "-m", "mwms_mpi.run", SCRIPT, "--checkpoint-dir", ckpt]
    first = run_mpi(4, [*base, "--replicas-per-worker", "1"], timeout=240)
    assert first.returncode == 0, first.describe()
    epochs = re.findall(r"epoch (\d+): loss", first.stdout)
    assert epochs == [str(e) for e in range(1, 21)], first.describe()  # only the chief prints
    accuracy = float(re.search(r"final test accuracy ([\d.]+)", first.stdout)[1])
    assert accuracy >= 0.9, first.describe()
    assert (ckpt / "checkpoint").exists()

    again = run_mpi(4, [*base, "--resume", "--epochs", "22", "--quiet"], timeout=240)
    assert again.returncode == 0, again.describe()
    assert re.search(r"resumed from .*ckpt-20 at epoch 20", again.stdout), again.describe()
    assert re.findall(r"epoch (\d+): loss", again.stdout) == ["21", "22"]
