"""PreemptionCheckpointHandler and TerminationConfig in one process: TF 2.21's protocol.

What TF 2.21 does (run with ``tensorflow-cpu==2.21.0``, one worker, MWMS, a step that sends
itself SIGTERM during its 3rd ``run``): the 4th ``run`` still trains, the 5th saves a checkpoint
with ``checkpointed_runs == 4`` and raises ``SystemExit(42)``; a new handler on the directory
restores it and ``total_run_calls`` is 4. The multi-worker agreement itself runs under
``mpiexec`` in ``tests/e2e/test_preemption.py``; here a stand-in communicator plays the others.
"""

from __future__ import annotations

import os
import signal
import time
import types
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import mwms_mpi
from mwms_mpi import _lifecycle, errors, train
from mwms_mpi.distribute import MirroredStrategy
from mwms_mpi.distribute.cluster_resolver import SimpleClusterResolver
from mwms_mpi.distribute.experimental import PreemptionCheckpointHandler, TerminationConfig
from mwms_mpi.train import ClusterSpec, _format

pytestmark = pytest.mark.timeout(60)


@pytest.fixture(autouse=True)
def sigterm_guard(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """Restores SIGTERM's handler after each test; until a handler installs its own, a SIGTERM
    is recorded here instead of ending pytest. Also forgets any agreed exit code."""
    caught: list[int] = []
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: caught.append(signum))
    monkeypatch.setattr(_lifecycle, "_agreed_exit_code", None)
    yield caught
    signal.signal(signal.SIGTERM, previous)


def _sigterm_at(call: int, log: list[int]) -> Callable[[], int]:
    """A training step that counts its calls and sends this process SIGTERM during ``call``."""

    def step() -> int:
        log.append(len(log) + 1)
        if len(log) == call:
            os.kill(os.getpid(), signal.SIGTERM)
        return len(log)

    return step


def _run_until_exit(handler: PreemptionCheckpointHandler, step: Callable[[], Any]) -> int:
    with pytest.raises(SystemExit) as info:
        for _ in range(1000):
            handler.run(step)
    return int(info.value.code)


def _saved_runs(directory: Path) -> int:
    latest = train.latest_checkpoint(str(directory))
    assert latest is not None
    return int(_format.read_checkpoint(latest).arrays["checkpointed_runs"])


def test_sigterm_saves_after_one_more_run_exits_42_and_restart_restores(
    tmp_path: Path, sigterm_guard: list[int]
) -> None:
    weight = mwms_mpi.Variable(np.float64(0.0))
    checkpoint = train.Checkpoint(w=weight)
    handler = PreemptionCheckpointHandler(None, checkpoint, str(tmp_path))
    log: list[int] = []
    step = _sigterm_at(3, log)

    def train_step() -> None:
        step()
        weight.assign_add(1.0)

    assert _run_until_exit(handler, train_step) == 42
    assert sigterm_guard == []  # the handler caught it
    assert log == [1, 2, 3, 4]  # as TF: one more run after the notice, then save and exit
    assert _lifecycle.agreed_exit_code() == 42  # the runner exits without abort
    assert _saved_runs(tmp_path) == 4 and hasattr(checkpoint, "checkpointed_runs")

    restored = mwms_mpi.Variable(np.float64(0.0))
    again = PreemptionCheckpointHandler(None, train.Checkpoint(w=restored), str(tmp_path))
    assert float(restored.numpy()) == 4.0
    with pytest.warns(DeprecationWarning, match="total_run_calls is deprecated"):
        assert again.total_run_calls == 4
    assert again.run(lambda: "result") == "result"


def test_custom_exit_fn_code_is_agreed_and_save_fn_replaces_the_manager(tmp_path: Path) -> None:
    saved: list[tuple[Any, ...]] = []
    config = TerminationConfig(
        exit_fn=lambda: os.sys.exit(143),  # type: ignore[attr-defined]
        save_fn=lambda *args, **kwargs: saved.append((args, kwargs)),
    )
    handler = PreemptionCheckpointHandler(
        None, train.Checkpoint(x=np.zeros(1)), str(tmp_path), config
    )
    os.kill(os.getpid(), signal.SIGTERM)
    handler.save_checkpoint_if_preempted("a", k=1)  # agrees: save at the next call
    assert saved == []
    with pytest.raises(SystemExit) as info:
        handler.save_checkpoint_if_preempted("b", k=2)
    assert info.value.code == 143 and _lifecycle.agreed_exit_code() == 143
    assert saved == [(("b",), {"k": 2})]
    assert train.latest_checkpoint(str(tmp_path)) is None  # save_fn did not save


def test_exit_fn_that_returns_lets_training_go_on_without_saving_again(tmp_path: Path) -> None:
    exits: list[int] = []
    manager = train.CheckpointManager(train.Checkpoint(x=np.zeros(1)), str(tmp_path), None)
    handler = PreemptionCheckpointHandler(
        None, manager, termination_config=TerminationConfig(exit_fn=lambda: exits.append(1))
    )
    log: list[int] = []
    step = _sigterm_at(1, log)
    for _ in range(6):
        handler.run(step)
    assert exits == [1] and len(log) == 6
    assert manager.checkpoints == [str(tmp_path / "ckpt-1")]  # the manager given is used


def test_grace_period_saves_at_once_then_again_before_it_ends(tmp_path: Path) -> None:
    grace = 1.0
    handler = PreemptionCheckpointHandler(
        None,
        train.Checkpoint(x=np.zeros(1)),
        str(tmp_path),
        TerminationConfig(grace_period=grace),
    )
    saves: list[tuple[int, float]] = []
    real_save = handler._manager.save

    def save(*args: Any, **kwargs: Any) -> Any:
        saves.append((handler._run_counter, time.monotonic()))
        return real_save(*args, **kwargs)

    handler._manager.save = save  # type: ignore[method-assign]
    log: list[int] = []
    signalled = _sigterm_at(2, log)
    start: list[float] = []

    def step() -> None:
        signalled()
        if len(log) == 2:
            start.append(time.monotonic())
        time.sleep(0.02)

    assert _run_until_exit(handler, step) == 42
    assert saves[0][0] == 3  # the first save: one run after the notice
    assert len(saves) == 2  # then training went on, and the final save came before the end
    assert saves[1][0] > saves[0][0] + 1 and saves[1][1] < start[0] + grace
    assert _saved_runs(tmp_path) == saves[1][0]


def test_termination_watcher_fn_is_polled_instead_of_sigterm(tmp_path: Path) -> None:
    notice = {"now": False}
    handler = PreemptionCheckpointHandler(
        None,
        train.Checkpoint(x=np.zeros(1)),
        str(tmp_path),
        TerminationConfig(termination_watcher_fn=lambda: notice["now"]),
    )
    assert signal.getsignal(signal.SIGTERM) != handler._sigterm_handler_fn
    for _ in range(3):
        handler.run(time.sleep, 0.01)
    notice["now"] = True
    start = time.monotonic()
    assert _run_until_exit(handler, lambda: time.sleep(0.01)) == 42
    assert time.monotonic() - start < 5  # polled every second, as TF
    assert handler._poll_thread is None  # stopped before exiting


class _OtherWorkers:
    """A communicator standing for other workers: their notice and their run() count."""

    def __init__(self, notice: int = 0, runs_ahead: int = 0) -> None:
        self.notice, self.runs_ahead, self.calls = notice, runs_ahead, 0

    def min_max(self, value: int, purpose: str) -> tuple[int, int]:
        if purpose == "checkpoint written":  # Checkpoint's "did any worker fail": none did
            return value, value
        self.calls += 1
        theirs = (value // 4 + self.runs_ahead) * 4 + self.notice
        return min(value, theirs), max(value, theirs)


def _handler_with_peers(tmp_path: Path, peers: _OtherWorkers) -> PreemptionCheckpointHandler:
    extended = types.SimpleNamespace(communicator=peers, should_checkpoint=True)
    strategy = types.SimpleNamespace(extended=extended, cluster_resolver=None)
    variable = types.SimpleNamespace(  # a variable of a two-worker strategy
        distribute_strategy=strategy, numpy=lambda: np.zeros(1), assign=lambda value: None
    )
    spec = ClusterSpec({"worker": ["a:1", "b:1"]})
    resolver = SimpleClusterResolver(spec, task_type="worker", task_id=0)
    return PreemptionCheckpointHandler(resolver, train.Checkpoint(v=variable), str(tmp_path))


def test_a_notice_on_another_worker_makes_this_one_save_and_exit(tmp_path: Path) -> None:
    peers = _OtherWorkers()
    handler = _handler_with_peers(tmp_path, peers)
    for _ in range(2):
        handler.run(lambda: None)
    peers.notice = 1  # another worker got SIGTERM
    handler.run(lambda: None)  # agreed here: save at the next call
    assert train.latest_checkpoint(str(tmp_path)) is None
    assert _run_until_exit(handler, lambda: None) == 42
    assert _saved_runs(tmp_path) == 3 and peers.calls == 3  # the saving call agrees nothing


def test_workers_at_different_steps_raise(tmp_path: Path) -> None:
    handler = _handler_with_peers(tmp_path, _OtherWorkers(runs_ahead=1))
    with pytest.raises(RuntimeError, match=r"different steps: 0 run\(\) calls on some, 1 on"):
        handler.run(lambda: None)
    # the likeliest cause, TF's tutorial's non-chief manager in workertemp_<id>, is named
    with pytest.raises(RuntimeError, match=r"give every worker the chief's checkpoint directory"):
        handler.run(lambda: None)


def test_argument_errors_as_tf(tmp_path: Path) -> None:
    checkpoint = train.Checkpoint(x=np.zeros(1))
    # TF 2.21 means InvalidArgumentError here (its call omits node_def/op: a TypeError there).
    with pytest.raises(errors.InvalidArgumentError, match="checkpoint_dir must be passed"):
        PreemptionCheckpointHandler(None, checkpoint)
    ps = SimpleClusterResolver(
        ClusterSpec({"worker": ["a:1"], "ps": ["b:1"]}), task_type="worker", task_id=0
    )
    with pytest.raises(NotImplementedError, match="ParameterServerStrategy"):
        PreemptionCheckpointHandler(ps, checkpoint, str(tmp_path))
    two = SimpleClusterResolver(
        ClusterSpec({"worker": ["a:1", "b:1"]}), task_type="worker", task_id=0
    )
    with pytest.raises(ValueError, match="has 2 workers, but _DefaultDistributionStrategy"):
        PreemptionCheckpointHandler(two, checkpoint, str(tmp_path))


def test_in_a_two_replica_scope_checkpointed_runs_is_mirrored(tmp_path: Path) -> None:
    strategy = MirroredStrategy(["/cpu:0", "/cpu:1"])
    with strategy.scope():
        weight = mwms_mpi.Variable(np.zeros(2))
        handler = PreemptionCheckpointHandler(
            strategy.cluster_resolver, train.Checkpoint(w=weight), str(tmp_path)
        )
    log: list[int] = []
    step = _sigterm_at(2, log)

    def train_step() -> None:
        step()
        strategy.run(lambda: weight.assign_add(np.ones(2)))

    assert _run_until_exit(handler, train_step) == 42
    runs = handler._checkpointed_runs
    assert [int(v) for v in strategy.experimental_local_results(runs)] == [3, 3]
    assert _saved_runs(tmp_path) == 3


def test_watch_preemption_scope_lets_errors_through(tmp_path: Path) -> None:
    handler = PreemptionCheckpointHandler(None, train.Checkpoint(x=np.zeros(1)), str(tmp_path))
    with handler.watch_preemption_scope():
        handler.run(lambda: None)
    with pytest.raises(errors.UnavailableError), handler.watch_preemption_scope():
        raise errors.UnavailableError(None, None, "peer gone")


def test_an_exit_that_does_not_end_the_program_saves_and_exits_again_as_tf(
    tmp_path: Path,
) -> None:
    # TF 2.21, SIGTERM before the first run, SystemExit(42) caught by the caller: every later
    # run() saves again and exits again, without training (calls 2-5; ckpt-4, save_counter 4,
    # total_run_calls 1). It exited once here and then trained on.
    weight = mwms_mpi.Variable(np.float64(0.0))
    checkpoint = train.Checkpoint(w=weight)
    handler = PreemptionCheckpointHandler(None, checkpoint, str(tmp_path))
    os.kill(os.getpid(), signal.SIGTERM)
    codes = []
    for _ in range(5):
        try:
            handler.run(lambda: weight.assign_add(1.0))
        except SystemExit as exc:
            codes.append(exc.code)
    assert codes == [42, 42, 42, 42]
    assert os.path.basename(str(train.latest_checkpoint(str(tmp_path)))) == "ckpt-4"
    assert int(checkpoint.save_counter) == 4 and float(weight.numpy()) == 1.0


def test_a_save_that_failed_is_made_again_at_the_next_call_as_tf(tmp_path: Path) -> None:
    # TF 2.21: the preemption save raises OSError at call 2; the caller goes on; call 3 saves
    # (checkpointed_runs 1, w 1.0) and exits 42. Here call 3 trained once more (runs 2, w 2.0).
    weight = mwms_mpi.Variable(np.float64(0.0))
    checkpoint = train.Checkpoint(w=weight)
    manager = train.CheckpointManager(checkpoint, str(tmp_path), max_to_keep=1)
    failures = [OSError("transient disk error")]

    def save_fn() -> None:
        if failures:
            raise failures.pop()
        manager.save()

    handler = PreemptionCheckpointHandler(
        None, manager, termination_config=TerminationConfig(save_fn=save_fn)
    )
    os.kill(os.getpid(), signal.SIGTERM)
    outcomes = []
    for _ in range(6):
        try:
            handler.run(lambda: weight.assign_add(1.0))
            outcomes.append("ran")
        except OSError:
            outcomes.append("OSError")
        except SystemExit as exc:
            outcomes.append(f"exit {exc.code}")
            break
    assert outcomes == ["ran", "OSError", "exit 42"]
    assert _saved_runs(tmp_path) == 1 and float(weight.numpy()) == 1.0
