"""ElasticHandler where a lost rank cannot be survived (these suites run without ULFM).

Each step runs as it is, and the handler says once, on the chief, why it cannot survive a lost
rank. The failure path, under Open MPI's ULFM: ``tests/e2e/test_elastic.py``.
"""

from __future__ import annotations

import logging
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from mwms_mpi import Variable, _lifecycle, data, distribute, train
from mwms_mpi.distribute.elastic import ElasticHandler

pytestmark = pytest.mark.mpi


@pytest.fixture(autouse=True)
def sigterm_guard(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The handler installs its own SIGTERM handler: the previous one is restored after each
    test, and an agreed exit code is forgotten."""
    previous = signal.getsignal(signal.SIGTERM)
    monkeypatch.setattr(_lifecycle, "_agreed_exit_code", None)
    yield
    signal.signal(signal.SIGTERM, previous)


def test_each_step_runs_as_it_is_and_the_chief_says_why_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    strategy = distribute.MultiWorkerMirroredStrategy()
    n, rank = strategy.num_replicas_in_sync, strategy.cluster_resolver.task_id
    batches = strategy.experimental_distribute_dataset(
        data.Dataset.range(3 * n).batch(n)  # one element per replica per step
    )
    with caplog.at_level(logging.WARNING, logger="mwms_mpi"):
        handler = ElasticHandler(strategy, train.Checkpoint())
        iterator = iter(batches)
        got = []
        for _ in range(3):
            first = handler.run(
                lambda batch, plus: strategy.experimental_local_results(batch)[0][0] + plus,
                iterator,
                100,
            )
            got.append(int(first))
        with pytest.raises(StopIteration):
            handler.run(lambda batch: batch, iterator)
    # step s gives replica r element s * n + r (the serial reference), on every rank
    assert got == [100 + s * n + rank for s in range(3)] and handler.steps == 3
    said = [r for r in caplog.records if "a lost rank cannot be survived here" in r.message]
    assert len(said) == (1 if rank == 0 and n > 1 else 0), said


def test_call_and_save_run_as_they_are(mpi_shared_dir: Path) -> None:
    """``call`` runs its function and returns its result; ``save`` is the manager's save (the
    checkpoint restores into a new object); without a manager ``save`` is refused."""
    strategy = distribute.MultiWorkerMirroredStrategy()
    with strategy.scope():
        v = Variable(np.arange(3.0), name="v")
    manager = train.CheckpointManager(train.Checkpoint(v=v), mpi_shared_dir, max_to_keep=2)
    handler = ElasticHandler(strategy, manager)
    assert handler.call(lambda a, b=0: a + b, 2, b=3) == 5
    path = handler.save()
    assert path == manager.latest_checkpoint and path is not None and path.endswith("-1")
    assert handler.save(checkpoint_number=7).endswith("-7")
    with strategy.scope():
        w = Variable(np.zeros(3), name="v")
    train.Checkpoint(v=w).restore(path).assert_consumed()
    np.testing.assert_array_equal(w.numpy(), np.arange(3.0))  # the serial reference
    with pytest.raises(ValueError, match="needs the handler made with a CheckpointManager"):
        ElasticHandler(strategy, train.Checkpoint(v=v)).save()


def test_a_termination_notice_on_one_rank_saves_and_stops_every_rank(
    mpi_shared_dir: Path,
) -> None:
    """Without ULFM a rank cannot leave alone: SIGTERM on rank 0 before the third step stops
    every rank at that step's start, after a save of the state after two steps, with TF's
    restart code, as ``PreemptionCheckpointHandler`` does."""
    strategy = distribute.MultiWorkerMirroredStrategy()
    with strategy.scope():
        v = Variable(np.zeros(2), name="v")
    manager = train.CheckpointManager(train.Checkpoint(v=v), mpi_shared_dir, max_to_keep=1)
    handler = ElasticHandler(strategy, manager)
    n, rank = strategy.num_replicas_in_sync, strategy.cluster_resolver.task_id
    iterator = iter(strategy.experimental_distribute_dataset(data.Dataset.range(8 * n).batch(n)))

    def step(batch: object) -> None:
        strategy.run(lambda: v.assign_add(np.ones(2)))

    for _ in range(2):
        handler.run(step, iterator)
    if rank == 0:
        os.kill(os.getpid(), signal.SIGTERM)
    with pytest.raises(SystemExit) as stopped:
        handler.run(step, iterator)
    assert stopped.value.code == _lifecycle.RESTART_CODE == 42
    assert handler.steps == 2
    np.testing.assert_array_equal(v.numpy(), [2.0, 2.0])  # the third step never ran
    with strategy.scope():
        w = Variable(np.zeros(2), name="v")
    train.Checkpoint(v=w).restore(manager.latest_checkpoint).assert_consumed()
    np.testing.assert_array_equal(w.numpy(), [2.0, 2.0])  # the serial reference
