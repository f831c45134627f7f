"""The main job (``make demo``) trains to >= 0.9 test accuracy at 4 workers and resumes."""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

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
    # stdout is a pipe here, as in a batch job's output file: no progress bar, no redraws
    assert "\r" not in first.stdout and "it/s" not in first.stdout, first.describe()

    again = run_mpi(4, [*base, "--resume", "--epochs", "22", "--quiet"], timeout=240)
    assert again.returncode == 0, again.describe()
    assert re.search(r"resumed from .*ckpt-20 at epoch 20", again.stdout), again.describe()
    assert re.findall(r"epoch (\d+): loss", again.stdout) == ["21", "22"]


def test_checkpoint_directory_per_run_and_resume_refusals(tmp_path: Path) -> None:
    base = [sys.executable, "-m", "mwms_mpi.run", SCRIPT, "--quiet", "--epochs", "1"]

    def demo(*args: str) -> Any:
        return run_mpi(2, [*base, *args], timeout=120, cwd=tmp_path)

    made = []
    for _ in range(2):  # each run gets a new directory, printed once, under the working dir
        result = demo()
        assert result.returncode == 0, result.describe()
        found = re.findall(
            r"^checkpoints: (checkpoints/digits-\d{8}-\d{6}-\d+)$", result.stdout, re.M
        )
        assert len(found) == 1, result.describe()
        made.append(found[0])
        assert (tmp_path / found[0] / "checkpoint").exists()
    assert made[0] != made[1]

    # --resume=auto (the sbatch default) on a directory without a checkpoint says it starts
    # over; run again, it resumes.
    result = demo("--resume=auto", "--checkpoint-dir", "fresh")
    assert result.returncode == 0, result.describe()
    assert result.stdout.count("no checkpoint in fresh: starting from scratch") == 1, (
        result.describe()
    )
    result = demo("--resume=auto", "--checkpoint-dir", "fresh")
    assert result.returncode == 0, result.describe()
    assert re.search(r"^resumed from fresh/ckpt-1 at epoch 1", result.stdout, re.M), (
        result.describe()
    )

    # A state file that names no checkpoint it can restore is never silently replaced.
    garbled = tmp_path / "garbled" / "checkpoint"
    garbled.parent.mkdir()
    garbled.write_bytes(b"model_checkpoint_path: 3\n")
    unusable = "the checkpoint state file garbled/checkpoint names no checkpoint that can be"
    refusals = {
        ("--resume",): "--resume needs the --checkpoint-dir",
        ("--resume", "--checkpoint-dir", "nowhere"): "--resume: there is no checkpoint in nowhere",
        ("--checkpoint-dir", made[0]): f"{made[0]} already holds the checkpoint",
        ("--resume", "--checkpoint-dir", made[0], "--optimizer", "adam"): (
            "is of another model or optimizer: it was trained with --optimizer 'sgd', this run "
            "asks for 'adam'"
        ),
        ("--resume=auto", "--checkpoint-dir", "garbled"): unusable,
        ("--checkpoint-dir", "garbled"): unusable,
    }
    for args, message in refusals.items():
        result = demo(*args)
        assert result.returncode == 2, result.describe()
        assert result.stderr.count("train_digits.py: error: ") == 1, result.describe()
        assert message in result.stderr, result.describe()
        assert "Abort" not in result.output and "Traceback" not in result.output
    assert not (tmp_path / "nowhere").exists()
    assert garbled.read_bytes() == b"model_checkpoint_path: 3\n"
    assert sorted(p.name for p in garbled.parent.iterdir()) == ["checkpoint"]
