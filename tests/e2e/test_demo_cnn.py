"""The main job (``make demo``, scripts/train_digits_cnn.py): a JAX CNN through mwms_mpi.

One worker and two train alike (losses to 1e-6 relative, and it learns); under op determinism
1 worker x 2 replicas and 2 workers x 1 replica give the same weights bit for bit, and so do
1x4 and 2x2; a SIGTERM mid-epoch saves, exits 42, and the resumed run ends with the
uninterrupted run's weights. Eight small jobs (1-2 epochs of 24 steps): about 50 s on a
loaded 2-core machine.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.support.launch import REPO_ROOT, LaunchResult, json_records, run_mpi, write_script

pytest.importorskip("jax", reason="the CNN demo needs the [jax] extra: pip install -e '.[jax]'")
pytest.importorskip("sklearn", reason="the CNN demo needs the [examples] extra (scikit-learn)")

pytestmark = pytest.mark.timeout(300)

SCRIPT = REPO_ROOT / "scripts" / "train_digits_cnn.py"
JOB_TIMEOUT_S = 120.0
STEPS_PER_EPOCH = 24  # 1500 examples, global batch 64: the last batch is partial (28)

# Sends SIGTERM to this rank in the middle of the step after `at` completed handler runs, and
# prints each rank's run count and the exit code all ranks agreed.
PREEMPT = """
    import json, os, runpy, signal, sys
    from mwms_mpi import _lifecycle
    from mwms_mpi.cluster.launcher import detect_launcher
    from mwms_mpi.distribute.experimental import PreemptionCheckpointHandler as Handler

    script, at = sys.argv[1], int(os.environ["SIGTERM_AT"])
    sys.argv = sys.argv[1:]
    rank, real_init, real_run, handlers = detect_launcher().rank, Handler.__init__, Handler.run, []

    def init(self, *args, **kwargs):
        real_init(self, *args, **kwargs)
        handlers.append(self)

    def run(self, fn, *args, **kwargs):
        if self._run_counter == at and rank == 1:
            def fn(*a, _fn=fn, **k):
                os.kill(os.getpid(), signal.SIGTERM)
                return _fn(*a, **k)
        return real_run(self, fn, *args, **kwargs)

    Handler.__init__, Handler.run = init, run
    try:
        runpy.run_path(script, run_name="__main__")
    finally:
        runs = handlers[0]._run_counter if handlers else None
        print(json.dumps({"rank": rank, "runs": runs, "agreed": _lifecycle.agreed_exit_code()}),
              flush=True)
"""


def _train(
    n: int,
    tmp: Path,
    name: str,
    *args: Any,
    program: Any = SCRIPT,
    env: dict[str, str] | None = None,
) -> LaunchResult:
    """``scripts/train_digits_cnn.py *args`` on ``n`` ranks (through ``program``, a wrapper
    that runs the script, when given), checkpoints in ``tmp/ckpt-<name>``."""
    argv = [sys.executable, "-m", "mwms_mpi.run", program]
    if program != SCRIPT:
        argv.append(SCRIPT)
    argv += ["--quiet", "--checkpoint-dir", tmp / f"ckpt-{name}", *args]
    return run_mpi(n, argv, timeout=JOB_TIMEOUT_S, env=env)


def _losses(result: LaunchResult) -> list[float]:
    return [float(v) for v in re.findall(r"^epoch \d+: loss ([\d.]+)", result.stdout, re.M)]


def _dump(path: Path, n: int) -> list[np.ndarray]:
    """Each rank's (steps, replicas, weights) dump."""
    return [np.load(f"{path}.rank{r}.npy") for r in range(n)]


@pytest.mark.mpi_neutral
def test_one_and_two_workers_train_alike(tmp_path: Path) -> None:
    one = _train(1, tmp_path, "one", "--epochs", "2")
    two = _train(2, tmp_path, "two", "--epochs", "2")
    for result in (one, two):
        assert result.returncode == 0, result.describe()
    assert len(_losses(one)) == 2 and len(_losses(two)) == 2, two.describe()
    np.testing.assert_allclose(_losses(two), _losses(one), rtol=1e-6, atol=0)
    assert _losses(two)[1] < 0.5 * _losses(two)[0], two.describe()  # it learns
    accuracy = float(re.search(r"final test accuracy ([\d.]+)", two.stdout)[1])
    assert accuracy >= 0.85, two.describe()
    assert two.stdout.count("final test accuracy") == 1  # only the chief prints


@pytest.fixture(scope="module")
def deterministic_two_workers(tmp_path_factory: pytest.TempPathFactory) -> np.ndarray:
    """2 workers x 1 replica, op determinism, one epoch: every replica's weights after every
    step, per rank, stacked (ranks, steps, replicas, weights)."""
    tmp = tmp_path_factory.mktemp("det2")
    result = _train(2, tmp, "det2", "--epochs", "1", "--deterministic", "--dump", tmp / "w")
    assert result.returncode == 0, result.describe()
    dumps = np.stack(_dump(tmp / "w", 2))
    assert dumps.shape[:3] == (2, STEPS_PER_EPOCH, 1), dumps.shape
    return dumps


@pytest.mark.mpi_neutral
def test_bitwise_equal_one_worker_two_replicas_and_two_workers(
    tmp_path: Path, deterministic_two_workers: np.ndarray
) -> None:
    args = ("--epochs", "1", "--deterministic", "--replicas-per-worker", "2")
    result = _train(1, tmp_path, "det1x2", *args, "--dump", tmp_path / "w")
    assert result.returncode == 0, result.describe()
    (one,) = _dump(tmp_path / "w", 1)
    assert one.shape[:2] == (STEPS_PER_EPOCH, 2), one.shape
    for replica in range(2):  # every replica of 1x2 equals every worker's replica of 2x1
        for rank in range(2):
            assert np.array_equal(one[:, replica], deterministic_two_workers[rank, :, 0]), (
                f"1x2 replica {replica} differs from 2x1 rank {rank}: max "
                f"{np.abs(one[:, replica] - deterministic_two_workers[rank, :, 0]).max():.3g}"
            )
    # not trivially equal: the weights move every step
    assert not np.array_equal(one[0, 0], one[-1, 0])


def test_sigterm_saves_and_resume_equals_uninterrupted(
    tmp_path: Path, deterministic_two_workers: np.ndarray
) -> None:
    wrapper = write_script(tmp_path, "preempt.py", PREEMPT)
    at = 10
    args = ("--epochs", "1", "--deterministic")
    first = _train(
        2,
        tmp_path,
        "preempted",
        *args,
        "--dump",
        tmp_path / "a",
        program=wrapper,
        env={"SIGTERM_AT": str(at)},
    )
    assert first.returncode == 42, first.describe()
    records = [r for r in json_records(first.stdout) if "runs" in r]
    assert sorted(r["rank"] for r in records) == [0, 1], first.describe()
    runs = {r["runs"] for r in records}
    assert len(runs) == 1 and {r["agreed"] for r in records} == {42}, records
    saved = runs.pop()
    assert at < saved < STEPS_PER_EPOCH, records
    assert first.stdout.count("preempted: saved") == 1, first.describe()

    again = _train(
        2,
        tmp_path,
        "preempted",
        *args,
        "--resume",
        "--dump",
        tmp_path / "b",
        program=wrapper,
        env={"SIGTERM_AT": "-1"},
    )
    assert again.returncode == 0, again.describe()
    assert f"at epoch 0, step {saved}" in again.stdout, again.describe()
    want = deterministic_two_workers
    pairs = zip(_dump(tmp_path / "a", 2), _dump(tmp_path / "b", 2), strict=True)
    for rank, (before, after) in enumerate(pairs):
        assert np.array_equal(before, want[rank, :saved]), f"rank {rank} before the preemption"
        assert np.array_equal(after, want[rank, saved:]), f"rank {rank} after the resume"


@pytest.mark.mpi_neutral
def test_bitwise_equal_four_replicas_as_one_worker_and_as_two(tmp_path: Path) -> None:
    """With 2 replicas a float sum has one order anyway; 4 replicas have several (1x4 sums in
    the process, 2x2 in pairs, then over MPI), and the weights differed by 1.2e-7 without op
    determinism. With it they are the same bits."""
    args = ("--epochs", "1", "--deterministic")
    one = _train(1, tmp_path, "1x4", *args, "--replicas-per-worker", "4", "--dump", tmp_path / "a")
    two = _train(2, tmp_path, "2x2", *args, "--replicas-per-worker", "2", "--dump", tmp_path / "b")
    for result in (one, two):
        assert result.returncode == 0, result.describe()
    (four,) = _dump(tmp_path / "a", 1)
    pairs = _dump(tmp_path / "b", 2)
    assert four.shape[:2] == (STEPS_PER_EPOCH, 4), four.shape
    for rank, dump in enumerate(pairs):
        assert dump.shape[:2] == (STEPS_PER_EPOCH, 2), dump.shape
        for replica in range(2):
            assert np.array_equal(dump[:, replica], four[:, 0]), (
                f"2x2 rank {rank} replica {replica} differs from 1x4: max "
                f"{np.abs(dump[:, replica] - four[:, 0]).max():.3g}"
            )


@pytest.mark.mpi_neutral
def test_step_benchmark_reports_its_parts() -> None:
    """``python -m mwms_mpi.cli.bench_cnn``: one record on rank 0 whose parts add up."""
    argv = [sys.executable, "-m", "mwms_mpi.cli.bench_cnn", "--steps", "20", "--json-only"]
    result = run_mpi(2, argv, timeout=JOB_TIMEOUT_S)
    assert result.returncode == 0, result.describe()
    (record,) = [r for r in json_records(result.stdout) if r.get("case") == "cnn step"]
    assert record["ranks"] == 2 and record["global_batch"] == 64, record
    us, share = record["median_us"], record["share"]
    assert all(us[k] > 0 for k in ("mwms_mpi", "raw", "library", "collective", "input")), us
    ours = ("library", "raw_collective", "mwms_mpi")  # our step's parts
    assert abs(sum(share[k] for k in ours) - 1) < 0.01, share
    assert us["library"] < us["mwms_mpi"] and us["collective"] < us["raw"], us
    raw_own = (us["raw"] - us["library"] - us["collective"]) / us["raw"]
    assert abs(share["raw_own"] - raw_own) < 0.01, (share, us)
