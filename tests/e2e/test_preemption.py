"""SIGTERM mid-epoch: all ranks save one step and exit 42; a restart ends as if uninterrupted.

Serial tests (this process never imports ``mpi4py.MPI``; docs/architecture.md, "Traps"). Each job
runs ``scripts/train_digits.py`` (float64, 2 epochs of 24 steps, last batch partial) under ``mpiexec
-n N python -m mwms_mpi.run preempt.py``: ``preempt.py`` wraps the script from the outside (the
library has no test hooks) to send SIGTERM, to record each rank's ``PreemptionCheckpointHandler``
run count at exit, and to SIGKILL the chief in the middle of the preemption save. The restarted job
(``--resume``) must continue from the saved step and, with the interrupted job, reproduce the 1-rank
uninterrupted run's weights at every step (N = 1 harness, compared within float64 summation-order
error).
"""

from __future__ import annotations

import json
import os
import re
import signal
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from mwms_mpi.train import _format
from tests.support.launch import (
    REPO_ROOT,
    LaunchResult,
    json_records,
    run_mpi,
    start_mpi,
    write_script,
)

pytestmark = pytest.mark.timeout(240)

SCRIPT = REPO_ROOT / "scripts" / "train_digits.py"
ARGS = ["--epochs", "2", "--dtype", "float64", "--quiet", "--learning-rate", "0.05"]
STEPS = 2 * 24
JOB_TIMEOUT_S = 90.0
RESTART_CODE = 42

# PLAN (JSON in the environment): "sigterm": {"at": runs, "ranks": [...]} sends SIGTERM to
# itself during the run() call after `at` completed runs; "kill_chief_at": runs makes rank 0
# SIGKILL itself while replacing an index file once that many runs completed; "pid_dir": each
# rank writes its pid there, rank 0 writes "running" after 5 runs, and every rank sleeps 50 ms
# per step from then on, so that a signal from outside lands in the middle of training.
PREEMPT = """
    import json, os, runpy, signal, sys, time
    from pathlib import Path
    from mwms_mpi import _lifecycle
    from mwms_mpi.cluster.launcher import detect_launcher
    from mwms_mpi.distribute.experimental import PreemptionCheckpointHandler as Handler

    script, plan = sys.argv[1], json.loads(os.environ["PREEMPT_PLAN"])
    sys.argv = sys.argv[1:]
    rank = detect_launcher().rank  # before MPI starts; any launcher's variables
    handlers = []
    real_init, real_run, real_replace = Handler.__init__, Handler.run, os.replace
    pid_dir = Path(plan["pid_dir"]) if plan.get("pid_dir") else None
    if pid_dir:
        (pid_dir / f"rank{rank}").write_text(str(os.getpid()))

    def init(self, *args, **kwargs):
        real_init(self, *args, **kwargs)
        handlers.append(self)

    def run(self, fn, *args, **kwargs):
        done = self._run_counter
        term = plan.get("sigterm")
        if pid_dir and done >= 5:
            if rank == 0:
                (pid_dir / "running").touch()
            time.sleep(0.05)
        if term and done == term["at"] and rank in term["ranks"]:
            def fn(*a, _fn=fn, **k):  # the signal arrives in the middle of this step
                os.kill(os.getpid(), signal.SIGTERM)
                return _fn(*a, **k)
        return real_run(self, fn, *args, **kwargs)

    def replace(src, dst, *args, **kwargs):
        at = plan.get("kill_chief_at")
        if at is not None and rank == 0 and str(dst).endswith(".index.json"):
            if handlers and handlers[0]._run_counter >= at:
                print(json.dumps({"rank": rank, "killed_in_save": str(dst)}), flush=True)
                os.kill(os.getpid(), signal.SIGKILL)
        return real_replace(src, dst, *args, **kwargs)

    Handler.__init__, Handler.run, os.replace = init, run, replace
    try:
        runpy.run_path(script, run_name="__main__")
    finally:
        runs = handlers[0]._run_counter if handlers else None
        print(json.dumps({"rank": rank, "runs": runs, "agreed": _lifecycle.agreed_exit_code()}),
              flush=True)
"""


def _argv(wrapper: Path, directory: Path, dump: Path, optimizer: str, *extra: str) -> list[Any]:
    return [
        sys.executable,
        "-m",
        "mwms_mpi.run",
        wrapper,
        SCRIPT,
        *ARGS,
        "--optimizer",
        optimizer,
        "--checkpoint-dir",
        directory,
        "--dump",
        dump,
        *extra,
    ]


def _dumps(dump: Path, n: int) -> list[np.ndarray]:
    return [np.load(f"{dump}.rank{r}.npy") for r in range(n)]  # (steps, replicas, weights)


def _assert_steps_equal(got: np.ndarray, want: np.ndarray, what: str) -> None:
    """Every replica's weights after every step equal the 1-rank run's (``want``).

    Every caller compares at least one step of at least one replica: an empty dump fails.
    """
    assert got.shape[0] == want.shape[0], f"{what}: {got.shape[0]} steps, not {want.shape[0]}"
    assert got.ndim == 3 and got.shape[0] > 0 and got.shape[1] > 0, f"{what}: dump {got.shape}"
    assert got.shape[2:] == want.shape[1:] and want.size > 0, f"{what}: {got.shape}, {want.shape}"
    for replica in range(got.shape[1]):
        worst = float(np.abs(got[:, replica] - want).max())
        assert worst < 1e-10, f"{what}, replica {replica}: max difference {worst:.3g}"


REFERENCE_EPOCHS: dict[str, list[str]] = {}  # the reference runs' epoch lines, per optimizer


EPOCH_LINE = re.compile(r"epoch \d+: loss [\d.]+ train accuracy [\d.]+ test accuracy \d\.\d{3}")


def _epoch_lines(stdout: str) -> list[str]:
    """The chief's epoch lines (found by pattern: another rank's output may share a line)."""
    return EPOCH_LINE.findall(stdout)


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> dict[str, np.ndarray]:
    """The uninterrupted 1-rank run's weights after every step, per optimizer (and its
    printed epoch lines in ``REFERENCE_EPOCHS``)."""
    tmp = tmp_path_factory.mktemp("reference")
    out = {}
    for optimizer in ("sgd", "adam"):
        argv = [sys.executable, "-m", "mwms_mpi.run", SCRIPT, *ARGS, "--optimizer", optimizer]
        dump = tmp / optimizer
        argv += ["--checkpoint-dir", tmp / f"ckpt-{optimizer}", "--dump", dump]
        result = run_mpi(1, argv, timeout=JOB_TIMEOUT_S)
        assert result.returncode == 0, result.describe()
        out[optimizer] = _dumps(dump, 1)[0][:, 0]
        assert out[optimizer].shape[0] == STEPS
        REFERENCE_EPOCHS[optimizer] = _epoch_lines(result.stdout)
        assert len(REFERENCE_EPOCHS[optimizer]) == 2, result.describe()
    return out


def _assert_preempted(result: LaunchResult, n: int) -> int:
    """All ranks exited 42 by agreement, at the same run count, with no abort; returns it."""
    assert result.returncode == RESTART_CODE, result.describe()
    assert not result.killed and result.wall_s < JOB_TIMEOUT_S, result.describe()
    for noise in ("Abort", "aborting", "BAD TERMINATION", "Traceback"):
        assert noise not in result.output, result.describe()
    records = [r for r in json_records(result.stdout) if "runs" in r]
    assert sorted(r["rank"] for r in records) == list(range(n)), result.describe()
    runs = {r["runs"] for r in records}
    assert len(runs) == 1 and {r["agreed"] for r in records} == {RESTART_CODE}, records
    assert result.stdout.count("preempted: saved") == 1, result.describe()  # the chief says so
    return runs.pop()


def _assert_checkpoint_at(directory: Path, runs: int) -> None:
    latest = _format.read_checkpoint(str(_latest(directory))).arrays
    assert int(latest["checkpointed_runs"]) == runs
    assert (int(latest["epoch"]), int(latest["step_in_epoch"])) == divmod(runs, 24)


def _latest(directory: Path) -> Path:
    state = (directory / "checkpoint").read_text().splitlines()[0]
    return directory / state.split('"')[1]


def _resume_and_check(
    wrapper: Path,
    directory: Path,
    tmp_path: Path,
    n: int,
    optimizer: str,
    want: np.ndarray,
    start: int,
) -> LaunchResult:
    dump = tmp_path / "resumed"
    argv = _argv(wrapper, directory, dump, optimizer, "--resume")
    result = run_mpi(n, argv, timeout=JOB_TIMEOUT_S, env={"PREEMPT_PLAN": "{}"})
    assert result.returncode == 0, result.describe()
    epoch, step = divmod(start, 24)
    assert f"at epoch {epoch}, step {step}" in result.stdout, result.describe()
    for rank, got in enumerate(_dumps(dump, n)):
        _assert_steps_equal(got, want[start:], f"resumed rank {rank}")
    # the resumed epoch reports the whole epoch (its metrics were checkpointed), as the
    # uninterrupted run printed it: loss, train and test accuracy to the printed digits
    assert _epoch_lines(result.stdout) == REFERENCE_EPOCHS[optimizer][epoch:], result.describe()
    return result


@pytest.mark.parametrize(
    ("n", "ranks", "optimizer", "k"),
    [(2, [1], "sgd", 1), (4, [2], "adam", 1), (2, [0, 1], "adam", 2), (4, [0, 1, 2, 3], "sgd", 1)],
    ids=["n2-rank1", "n4-rank2", "n2-all-k2", "n4-all"],
)
def test_sigterm_mid_epoch_saves_same_step_and_resume_equals_uninterrupted(
    tmp_path: Path,
    reference: dict[str, np.ndarray],
    n: int,
    ranks: list[int],
    optimizer: str,
    k: int,
) -> None:
    wrapper = write_script(tmp_path, "preempt.py", PREEMPT)
    directory, dump = tmp_path / "ckpt", tmp_path / "first"
    at = 30  # epoch 2, step 7: after the epoch-1 checkpoint
    plan = {"sigterm": {"at": at, "ranks": ranks}}
    first = run_mpi(
        n,
        _argv(wrapper, directory, dump, optimizer, "--replicas-per-worker", str(k)),
        timeout=JOB_TIMEOUT_S,
        env={"PREEMPT_PLAN": json.dumps(plan)},
    )
    runs = _assert_preempted(first, n)
    assert runs == at + 2  # as TF: agreed at the next call, saved at the one after
    _assert_checkpoint_at(directory, runs)
    want = reference[optimizer]
    for rank, got in enumerate(_dumps(dump, n)):
        _assert_steps_equal(got, want[:runs], f"interrupted rank {rank}")
    _resume_and_check(wrapper, directory, tmp_path, n, optimizer, want, runs)


def test_sigterm_sent_from_outside_to_one_rank(
    tmp_path: Path, reference: dict[str, np.ndarray]
) -> None:
    wrapper = write_script(tmp_path, "preempt.py", PREEMPT)
    directory, dump, pids = tmp_path / "ckpt", tmp_path / "first", tmp_path / "pids"
    pids.mkdir()
    job = start_mpi(
        2,
        _argv(wrapper, directory, dump, "sgd"),
        timeout=JOB_TIMEOUT_S,
        env={"PREEMPT_PLAN": json.dumps({"pid_dir": str(pids)})},
    )
    try:
        deadline = time.monotonic() + 60
        while not (pids / "running").exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert (pids / "running").exists(), "the job never reached its 5th step"
        os.kill(int((pids / "rank1").read_text()), signal.SIGTERM)
    finally:
        first = job.wait()
    runs = _assert_preempted(first, 2)
    assert 5 <= runs < STEPS
    _assert_checkpoint_at(directory, runs)
    want = reference["sgd"]
    for rank, got in enumerate(_dumps(dump, 2)):
        _assert_steps_equal(got, want[:runs], f"interrupted rank {rank}")
    _resume_and_check(wrapper, directory, tmp_path, 2, "sgd", want, runs)


def test_sigkill_during_the_preemption_save_leaves_the_previous_checkpoint(
    tmp_path: Path, reference: dict[str, np.ndarray]
) -> None:
    wrapper = write_script(tmp_path, "preempt.py", PREEMPT)
    directory, dump = tmp_path / "ckpt", tmp_path / "first"
    plan = {"sigterm": {"at": 30, "ranks": [1]}, "kill_chief_at": 32}
    first = run_mpi(
        2,
        _argv(wrapper, directory, dump, "sgd"),
        timeout=JOB_TIMEOUT_S,
        env={"PREEMPT_PLAN": json.dumps(plan)},
    )
    assert first.returncode not in (0, RESTART_CODE) and not first.killed, first.describe()
    killed = [r for r in json_records(first.stdout) if "killed_in_save" in r]
    assert [Path(r["killed_in_save"]).name for r in killed] == ["ckpt-2.index.json"], killed
    assert _latest(directory).name == "ckpt-1"  # the epoch-1 checkpoint
    leftovers = [p.name for p in directory.iterdir() if p.name.startswith((".ckpt-2", "ckpt-2"))]
    assert leftovers, "the killed save left nothing behind: the test did not kill mid-save"

    result = _resume_and_check(wrapper, directory, tmp_path, 2, "sgd", reference["sgd"], 24)
    assert "resumed from" in result.stdout and "ckpt-1 at epoch 1, step 0" in result.stdout
    names = sorted(p.name for p in directory.iterdir())
    assert not [n for n in names if ".tmp" in n or n.startswith("workertemp_")], names
    index = json.loads((directory / "ckpt-2.index.json").read_text())
    assert [n for n in names if n.startswith("ckpt-2.data-")] == [index["data_file"]]


CONFIGURED = """
    import json, os, signal, sys
    import numpy as np
    import mwms_mpi
    from mwms_mpi import distribute, train
    from mwms_mpi.distribute.experimental import PreemptionCheckpointHandler, TerminationConfig

    directory, code = sys.argv[1], sys.argv[2]
    strategy = distribute.MultiWorkerMirroredStrategy()
    rank = strategy.cluster_resolver.task_id
    config = TerminationConfig() if code == "default" else TerminationConfig(
        exit_fn=lambda: sys.exit(int(code)))
    with strategy.scope():
        step = mwms_mpi.Variable(np.int64(0))
        handler = PreemptionCheckpointHandler(
            strategy.cluster_resolver, train.Checkpoint(step=step), directory, config)
    try:
        for i in range(100):
            if i == 3 and rank == strategy.num_replicas_in_sync - 1:
                os.kill(os.getpid(), signal.SIGTERM)
            step.assign_add(np.int64(1))
            handler.save_checkpoint_if_preempted()
    finally:
        print(json.dumps({"rank": rank, "step": int(step.numpy())}), flush=True)
"""


@pytest.mark.parametrize(("code", "expected"), [("default", 42), ("77", 77)])
def test_every_rank_exits_with_the_configured_code(
    tmp_path: Path, code: str, expected: int
) -> None:
    script = write_script(tmp_path, "configured.py", CONFIGURED)
    result = run_mpi(
        2,
        [sys.executable, "-m", "mwms_mpi.run", script, tmp_path / "ckpt", code],
        timeout=JOB_TIMEOUT_S,
    )
    assert result.returncode == expected, result.describe()
    assert "Abort" not in result.output and "Traceback" not in result.output, result.describe()
    steps = sorted((r["rank"], r["step"]) for r in json_records(result.stdout))
    # SIGTERM before step 4; agreed in the 4th save_checkpoint_if_preempted(), saved in the 5th,
    # which counts the 4 calls before it: what TF 2.21 saves for the same loop (step 5, runs 4).
    assert steps == [(0, 5), (1, 5)], result.describe()
    saved = _format.read_checkpoint(str(_latest(tmp_path / "ckpt"))).arrays
    assert int(saved["step"]) == 5 and int(saved["checkpointed_runs"]) == 4
