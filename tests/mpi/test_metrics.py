"""``mwms_mpi.metrics`` under MultiWorkerMirroredStrategy at this world size, k = 1 and 2.

Every replica feeds its own batches (``metric_cases.replica_batch`` of its global replica id);
``result()`` in cross-replica context must be the global value on every rank: equal to the
serial numpy reference over all replicas' batches (``metric_reference``), and to Keras 3.15.1's
pinned value for the same number of replicas (TF recorded 1, 2 and 4; at 8 only the reference
applies). The replica-context results are compared worker by worker where TF ran the same
(workers, k). A checkpoint written after the first step and restored into fresh metrics must
continue exactly as the uninterrupted run. The ranks agree on pass/fail before asserting.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

import mwms_mpi.metrics as metrics
from mwms_mpi import errors
from mwms_mpi.train import Checkpoint
from tests.support import metric_cases as mc
from tests.support.metric_reference import expected_distributed, matches, pins
from tests.support.mpi import all_ranks_ok, odd_rank, rank_size, replica_id, still_works

pytestmark = pytest.mark.mpi


def _keras(replicas: int, size: int, k: int, rank: int) -> dict[str, Any] | None:
    """Keras's outcomes for this rank: TF's worker ``rank`` at the same (workers, k), else any
    pinned run with the same number of replicas (global values only), else ``None``."""
    configs = pins()["configs"]
    same = configs.get(f"mwms_n{size}_k{k}")
    if same is not None:
        return dict(same[rank])
    for runs in configs.values():
        if runs[0]["R"] == replicas:
            found = dict(runs[0])
            found.pop("Mean/replica_context_result")
            return found
    return None


def test_global_results_match_keras_and_serial(
    strategy: Any, test_comm: Any, mpi_shared_dir: Path
) -> None:
    rank, size = rank_size()
    k = len(strategy.extended.worker_devices)
    replicas = strategy.num_replicas_in_sync
    ours = mc.run_distributed(
        metrics, strategy, lambda ms: Checkpoint(metrics=ms), str(mpi_shared_dir)
    )
    serial = expected_distributed(replicas, range(rank * k, rank * k + k))
    keras = _keras(replicas, size, k, rank)
    wrong = [
        (key, serial[key], found)
        for key, found in ours.items()
        if key != "meta" and not matches(serial[key], found)
    ]
    if keras is not None:
        wrong += [
            (key, expected, ours[key])
            for key, expected in keras.items()
            if key not in ("meta", "R") and not matches(expected, ours[key])
        ]
    assert all_ranks_ok(test_comm, not wrong), f"rank {rank}: {wrong}"


def test_each_rank_fed_its_own_batches(strategy: Any, test_comm: Any) -> None:
    """The metric sums what every replica saw, not what this rank saw (a local-only result
    would pass at one rank only): a ``Sum`` of each replica's id + 1."""
    with strategy.scope():
        total = metrics.Sum(name="ids")
    strategy.run(lambda: total.update_state(np.float32(replica_id() + 1)))
    n = strategy.num_replicas_in_sync
    result = total.result()
    ok = result.dtype == np.float32 and result.shape == () and float(result) == n * (n + 1) / 2
    assert all_ranks_ok(test_comm, ok), f"{result!r} != {n * (n + 1) / 2}"


def test_reads_of_different_metrics_raise_on_every_rank(strategy: Any, test_comm: Any) -> None:
    """A result read on one rank and another metric's on another: the reads are agreed
    ("SyncOnRead read of `<metric>/total`"), so every rank raises instead of mixing them."""
    rank, size = rank_size()
    with strategy.scope():
        first, second = metrics.Mean(name="loss_a"), metrics.Mean(name="loss_b")
    strategy.run(lambda: (first.update_state([1.0]), second.update_state([3.0])))
    if size == 1:
        ok = float(first.result()) == 1.0 and float(second.result()) == 3.0
        assert all_ranks_ok(test_comm, ok)
        return
    try:
        (second if odd_rank() else first).result()
        outcome = "returned without raising"
    except errors.InvalidArgumentError as exc:
        texts = ["SyncOnRead read of `loss_a/total`", "SyncOnRead read of `loss_b/total`"]
        missing = [t for t in texts if t not in str(exc)]
        outcome = f"missing {missing}: {exc}" if missing else ""
    assert all_ranks_ok(test_comm, not outcome), f"rank {rank}: {outcome}"
    still_works(strategy)
    ok = float(first.result()) == 1.0 and float(second.result()) == 3.0  # nothing was mixed
    assert all_ranks_ok(test_comm, ok)


class _Total(metrics.Metric):
    """A user's metric without a name of its own: Keras names it ``_total``, ``_total_1``..."""

    def __init__(self) -> None:
        super().__init__()
        self.total = self.add_variable(shape=(), initializer="zeros", name="total")

    def update_state(self, value: Any) -> None:
        self.add_to(self.total, value)

    def result(self) -> np.ndarray:
        return self.read(self.total)


def test_a_rank_that_made_one_more_unnamed_metric_still_reads_alike(
    strategy: Any, test_comm: Any
) -> None:
    """Keras's automatic names count this process's metrics: a chief that made one more
    unnamed metric (its own, outside the scope) names the next one ``_total_N+1`` where the
    other ranks say ``_total_N``. TF agrees no names; the agreed creation and reads of that
    metric's variables must not fail on the number (they raised "ranks called different
    APIs")."""
    if test_comm.Get_rank() == 0:
        _Total()  # the chief's own, never used in the strategy
    with strategy.scope():
        total = _Total()
    strategy.run(lambda: total.update_state(np.float32(replica_id() + 1)))
    n = strategy.num_replicas_in_sync
    result = total.result()
    ok = result.dtype == np.float32 and float(result) == n * (n + 1) / 2
    assert all_ranks_ok(test_comm, ok), f"{result!r} != {n * (n + 1) / 2}"
