"""N-worker synchronous training equals 1-worker training on the same global batches.

``scripts/train_digits.py`` trains a small MLP on the digits data in float64 with a global batch
of 64 (1500 examples: the last batch of each epoch is partial, 28 examples), with the loss scaled
by the global batch size. Every replica of every worker writes its weights after every step; all
of them must equal the 1-worker run's weights at every step, not just at the end.

The bitwise mode: with op determinism on and the number of logical replicas fixed (8 = N x k),
every step's weights and every checkpointed tensor are the same bits at N = 1, 2, 4 and 8.

Both compare mwms_mpi with itself, so a defect that does not depend on the world size (an
optimizer's rule, its step counter) passes them. The independent side is
``tests/support/serial_training.py``: the same job written in plain numpy (whole global batch,
hand-written backward pass, Keras's update rules), which imports nothing from mwms_mpi; the
1-worker and every N-worker run must match it at every step (its docstring derives the
tolerance). It adds no MPI run: it checks the dumps these tests make anyway.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.support import serial_training
from tests.support.launch import REPO_ROOT, run_mpi

pytestmark = pytest.mark.timeout(300)

SCRIPT = REPO_ROOT / "scripts" / "train_digits.py"
LEARNING_RATE = 0.05
ARGS = ["--epochs", "2", "--dtype", "float64", "--quiet", "--learning-rate", str(LEARNING_RATE)]
STEPS = 2 * serial_training.STEPS_PER_EPOCH


def _train(
    tmp_path: Path,
    ranks: int,
    replicas: int,
    optimizer: str,
    extra: tuple[str, ...] = (),
    args: list[str] = ARGS,
) -> list[np.ndarray]:
    tag = f"n{ranks}k{replicas}{optimizer}"
    dump = tmp_path / tag
    argv: list[Any] = [
        sys.executable,
        "-m",
        "mwms_mpi.run",
        SCRIPT,
        *args,
        *extra,
        "--optimizer",
        optimizer,
        "--replicas-per-worker",
        str(replicas),
        "--dump",
        dump,
        "--checkpoint-dir",
        tmp_path / f"ckpt-{tag}",
    ]
    result = run_mpi(ranks, argv, timeout=240)
    assert result.returncode == 0, result.describe()
    return [np.load(f"{dump}.rank{r}.npy") for r in range(ranks)]


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> dict[str, np.ndarray]:
    tmp = tmp_path_factory.mktemp("reference")
    return {opt: _train(tmp, 1, 1, opt)[0] for opt in ("sgd", "adam")}


@pytest.fixture(scope="module")
def anchor() -> dict[tuple[str, str], np.ndarray]:
    """The serial numpy anchor's weights after every step (milliseconds: no MPI job)."""
    return {
        (opt, dtype): serial_training.train(opt, LEARNING_RATE, dtype, STEPS).weights
        for opt, dtype in (("sgd", "float64"), ("adam", "float64"), ("sgd", "float32"))
    }


def test_the_anchor_trains_on_the_scripts_batches() -> None:
    """The anchor's data order is the script's (``mwms_mpi.data`` shuffle and batch).

    The anchor writes the order out itself; were the package's shuffle to change, this test
    says so before the weight comparisons below fail for a reason that is not the training.
    """
    from mwms_mpi import data  # the package's pipeline, as the script builds it

    x, y = serial_training.digits(np.float64)
    for epoch in range(2):
        dataset = (
            data.Dataset.from_tensor_slices((x, y))
            .shuffle(
                len(x),
                seed=serial_training.SEED * 100_003 + epoch,
                reshuffle_each_iteration=False,
            )
            .batch(serial_training.GLOBAL_BATCH)
        )
        got = [(np.asarray(bx), np.asarray(by)) for bx, by in dataset]
        want = list(serial_training.epoch_batches(x, y, epoch))
        assert [len(b) for b, _ in got] == [64] * 23 + [28]
        assert len(got) == len(want), epoch
        for i, ((gx, gy), (wx, wy)) in enumerate(zip(got, want, strict=True)):
            assert np.array_equal(gx, wx) and np.array_equal(gy, wy), (
                f"epoch {epoch}, batch {i}: mwms_mpi.data's order differs from "
                "serial_training.shuffled_order (update the anchor's copy of it)"
            )


@pytest.mark.mpi_neutral
@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
def test_one_worker_trains_like_the_serial_anchor(
    reference: dict[str, np.ndarray], anchor: dict[tuple[str, str], np.ndarray], optimizer: str
) -> None:
    """The N = 1 reference itself is right: it matches plain numpy with Keras's rules."""
    want = anchor[(optimizer, "float64")]
    got = reference[optimizer]
    assert got.shape == (STEPS, 1, want.shape[1]), got.shape
    serial_training.assert_close_to_anchor(
        got[:, 0], want, f"1 worker, {optimizer}", serial_training.TOLERANCE
    )


@pytest.mark.mpi_neutral
@pytest.mark.parametrize(("ranks", "replicas"), [(2, 1), (4, 1), (2, 2)])
@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
def test_n_workers_train_like_one(
    tmp_path: Path,
    reference: dict[str, np.ndarray],
    anchor: dict[tuple[str, str], np.ndarray],
    ranks: int,
    replicas: int,
    optimizer: str,
) -> None:
    want = reference[optimizer]  # (steps, 1 replica, weights)
    assert want.shape[0] == 2 * 24 and want.shape[1] == 1  # 24 steps per epoch, last partial
    for rank, got in enumerate(_train(tmp_path, ranks, replicas, optimizer)):
        assert got.shape == (want.shape[0], replicas, want.shape[2]), f"rank {rank}"
        for replica in range(replicas):
            diff = np.abs(got[:, replica] - want[:, 0]).max(axis=1)
            assert (diff <= 1e-5).all(), (
                f"rank {rank} replica {replica}: first step off by more than 1e-5: "
                f"{int(np.argmax(diff > 1e-5))}, max difference {diff.max():.3g}"
            )
            assert diff.max() < 1e-10  # float64: only summation order differs
            serial_training.assert_close_to_anchor(
                got[:, replica],
                anchor[(optimizer, "float64")],
                f"{ranks} workers x {replicas}, rank {rank} replica {replica}",
                serial_training.TOLERANCE,
            )


@pytest.mark.parametrize(("optimizer", "dtype"), [("sgd", "float32"), ("adam", "float64")])
def test_deterministic_training_is_the_same_bits_at_any_world_size(
    tmp_path: Path, anchor: dict[tuple[str, str], np.ndarray], optimizer: str, dtype: str
) -> None:
    args = ["--epochs", "1", "--dtype", dtype, "--quiet", "--learning-rate", str(LEARNING_RATE)]
    runs: dict[Any, Any] = {}  # ranks -> steps; (ranks, "checkpoint") -> tensors
    for ranks in (1, 2, 4, 8):
        dumps = _train(tmp_path, ranks, 8 // ranks, optimizer, ("--deterministic",), args)
        every = np.concatenate(dumps, axis=1)  # (steps, 8 replicas, weights)
        assert every.shape[1] == 8
        for replica in range(1, 8):  # every replica holds the same bits
            assert every[:, replica].tobytes() == every[:, 0].tobytes(), (ranks, replica)
        runs[ranks] = every[:, 0]
        if ranks == 1:  # the bits all world sizes share are the right ones
            tolerance = (
                serial_training.TOLERANCE
                if dtype == "float64"
                else serial_training.TOLERANCE_FLOAT32
            )
            serial_training.assert_close_to_anchor(
                runs[1],
                anchor[(optimizer, dtype)][: serial_training.STEPS_PER_EPOCH],
                f"deterministic, 1 worker x 8, {optimizer} {dtype}",
                tolerance,
            )
        ckpt = sorted((tmp_path / f"ckpt-n{ranks}k{8 // ranks}{optimizer}").glob("*.npz"))[-1]
        with np.load(ckpt) as saved:
            runs[(ranks, "checkpoint")] = {k: saved[k].tobytes() for k in saved.files}
    for ranks in (2, 4, 8):
        steps = runs[ranks]
        assert steps.tobytes() == runs[1].tobytes(), (
            f"{ranks} workers: first step that differs from 1 worker's: "
            f"{int(np.argmax((steps != runs[1]).any(axis=1)))}"
        )
        assert runs[(ranks, "checkpoint")] == runs[(1, "checkpoint")], f"{ranks} workers"
