"""The demo trained on CuPy arrays: N workers on one GPU train like one, as accurately as the CPU.

Serial tests that launch ``mpiexec`` (as ``tests/e2e``): ``make test-gpu`` runs them once per
MPI, outside the ranks' own pytest. ``scripts/train_digits.py --device gpu`` keeps the weights
on each replica's GPU and has the strategy fetch every batch there.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.gpu.conftest import FAKE, FAKE_ENV
from tests.support import serial_training
from tests.support.launch import REPO_ROOT, run_mpi

pytestmark = pytest.mark.timeout(900)

SCRIPT = REPO_ROOT / "scripts" / "train_digits.py"
FAKE_RUN = REPO_ROOT / "tests" / "support" / "fake_cupy_run.py"
ARGS = ["--epochs", "2", "--quiet", "--learning-rate", "0.05"]


def _train(
    tmp: Path,
    ranks: int,
    device: str,
    *extra: str,
    replicas: int = 1,
    env: dict[str, str] | None = None,
) -> tuple[list[np.ndarray], str]:
    tag = f"{device}-n{ranks}k{replicas}-{'-'.join(extra).replace('--', '')}"
    dump = tmp / tag
    fake = os.environ.get(FAKE_ENV) == "1" and device == "gpu"
    launch = [sys.executable, FAKE_RUN] if fake else [sys.executable, "-m", "mwms_mpi.run"]
    argv = [
        *launch,
        SCRIPT,
        *ARGS,
        *extra,
        "--device",
        device,
        "--replicas-per-worker",
        str(replicas),
        "--dump",
        dump,
        "--checkpoint-dir",
        tmp / f"ckpt-{tag}",
    ]
    result = run_mpi(ranks, argv, timeout=400, env=env)
    assert result.returncode == 0, result.describe()
    return [np.load(f"{dump}.rank{r}.npy") for r in range(ranks)], result.output


def _final_accuracy(stdout: str) -> float:
    found = re.search(r"final test accuracy ([0-9.]+)", stdout)
    assert found, stdout
    return float(found.group(1))


@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
def test_two_workers_on_one_gpu_train_like_one(tmp_path: Path, optimizer: str) -> None:
    extra = ("--dtype", "float64", "--optimizer", optimizer)
    (want,), _ = _train(tmp_path, 1, "gpu", *extra)
    assert want.shape[0] == 2 * 24
    # an anchor that shares no code with the package: the same job in serial numpy
    anchor = serial_training.train(optimizer, 0.05, "float64", want.shape[0]).weights
    tolerance = serial_training.TOLERANCE
    serial_training.assert_close_to_anchor(want[:, 0], anchor, "1 worker on the GPU", tolerance)
    for rank, got in enumerate(_train(tmp_path, 2, "gpu", *extra)[0]):
        diff = np.abs(got[:, 0] - want[:, 0]).max(axis=1)
        assert diff.max() < 1e-10, f"rank {rank}: step {int(np.argmax(diff))} off by {diff.max()}"
        what = f"rank {rank} of 2 on the GPU"
        serial_training.assert_close_to_anchor(got[:, 0], anchor, what, tolerance)


def test_two_workers_with_a_gpu_each_train_like_one_through_nccl(tmp_path: Path) -> None:
    """NCCL end to end: each worker on a GPU of its own (under the fake CuPy: a fake GPU per
    rank and the NCCL double); float64 weights at every step equal one worker's."""
    if not FAKE:
        import cupy

        if cupy.cuda.runtime.getDeviceCount() < 2:
            pytest.skip("one GPU: NCCL refuses two ranks on it (the test of that refusal)")
    from tests.support.fake_cupy import OWN_GPUS_ENV

    env = {OWN_GPUS_ENV: "1", "MWMS_MPI_LOG_LEVEL": "INFO"}
    extra = ("--dtype", "float64", "--optimizer", "adam")
    (want,), _ = _train(tmp_path, 1, "gpu", *extra)
    dumps, output = _train(tmp_path, 2, "gpu", *extra, env=env)
    assert "CuPy arrays: nccl" in output, output[-3000:]
    anchor = serial_training.train("adam", 0.05, "float64", want.shape[0]).weights
    tolerance = serial_training.TOLERANCE
    serial_training.assert_close_to_anchor(want[:, 0], anchor, "1 worker on the GPU", tolerance)
    for rank, got in enumerate(dumps):
        diff = np.abs(got[:, 0] - want[:, 0]).max(axis=1)
        assert diff.max() < 1e-10, f"rank {rank}: step {int(np.argmax(diff))} off by {diff.max()}"
        what = f"rank {rank} of 2 through NCCL"
        serial_training.assert_close_to_anchor(got[:, 0], anchor, what, tolerance)


@pytest.mark.fake_gpu_not_evidence
def test_gpu_training_is_as_accurate_as_on_the_cpu(tmp_path: Path) -> None:
    _, cpu = _train(tmp_path, 2, "cpu")
    _, gpu = _train(tmp_path, 2, "gpu")
    assert abs(_final_accuracy(gpu) - _final_accuracy(cpu)) <= 0.02, (cpu, gpu)


def test_deterministic_gpu_training_is_the_same_bits_at_1_and_2_workers(tmp_path: Path) -> None:
    """Op determinism, 4 logical replicas on the one GPU: 1 x 4 and 2 x 2 give the same bits."""
    runs = {}
    for ranks in (1, 2):
        dumps, _ = _train(tmp_path, ranks, "gpu", "--deterministic", replicas=4 // ranks)
        every = np.concatenate(dumps, axis=1)
        assert every.shape[1] == 4
        runs[ranks] = every[:, 0]
        for replica in range(1, 4):
            assert every[:, replica].tobytes() == every[:, 0].tobytes(), (ranks, replica)
    assert runs[2].tobytes() == runs[1].tobytes()
    anchor = serial_training.train("sgd", 0.05, "float32", runs[1].shape[0]).weights
    serial_training.assert_close_to_anchor(
        runs[1], anchor, "deterministic, 1 worker x 4 on the GPU", serial_training.TOLERANCE_FLOAT32
    )
