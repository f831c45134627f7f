"""ElasticHandler where a lost rank cannot be survived (these suites run without ULFM).

Each step runs as it is, and the handler says once, on the chief, why it cannot survive a lost
rank. The failure path, under Open MPI's ULFM: ``tests/e2e/test_elastic.py``.
"""

from __future__ import annotations

import logging

import pytest

from mwms_mpi import data, distribute, train
from mwms_mpi.distribute.elastic import ElasticHandler

pytestmark = pytest.mark.mpi


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
