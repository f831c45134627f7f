"""A variable made outside ``strategy.scope()`` is refused by a scoped optimizer on every rank.

Unrefused, each rank would update only its own copy with its own data-dependent gradient and the
workers' weights would drift apart with no error; TF 2.21 refuses it with a ValueError from the
slot creation (``colocate_vars_with``), before any collective, so no rank waits for another.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import mwms_mpi
from mwms_mpi import optimizers

pytestmark = pytest.mark.mpi


def test_outside_variable_refused_on_every_rank_and_scoped_one_trains_alike(
    strategy: Any, test_comm: Any
) -> None:
    rank, size = test_comm.Get_rank(), test_comm.Get_size()
    outside = mwms_mpi.Variable(np.array([1.0, 2.0]))
    with strategy.scope():
        inside = mwms_mpi.Variable(np.array([1.0, 2.0]))
        opt = optimizers.SGD(0.5)

    def step(var: Any) -> None:
        opt.apply_gradients([(np.full(2, float(rank + 1)), var)])  # differs per rank

    with pytest.raises(ValueError, match="must only be passed a variable created in this"):
        strategy.run(step, args=(outside,))
    assert outside.numpy().tolist() == [1.0, 2.0]
    strategy.run(step, args=(inside,))
    k = strategy.num_replicas_in_sync // size
    total = k * size * (size + 1) / 2  # every replica's gradient, summed
    for copy in strategy.experimental_local_results(inside):
        np.testing.assert_array_equal(np.asarray(copy), np.array([1.0, 2.0]) - 0.5 * total)


def test_a_rank_that_named_one_more_optimizer_still_trains_alike(
    strategy: Any, test_comm: Any
) -> None:
    """Keras's automatic names count this process's objects: a chief that made one more
    ``SGD()`` (for its own evaluation, outside the scope) names the next ``sgd_N+1`` where the
    other ranks say ``sgd_N``. TF agrees no names and trains on; the agreement of the
    optimizer's variable creation must not fail on the number (it raised InvalidArgumentError
    "ranks called different APIs: Variable creation of `sgd_1/iteration` ...")."""
    if test_comm.Get_rank() == 0:
        optimizers.SGD(0.1)  # the chief's own, never used in the strategy
    with strategy.scope():
        var = mwms_mpi.Variable(np.ones(2, np.float32))
        opt = optimizers.SGD(0.1)
    strategy.run(lambda: opt.apply_gradients([(np.ones(2, np.float32), var)]))
    expected = np.float32(1) - np.float32(0.1) * np.float32(strategy.num_replicas_in_sync)
    for copy in strategy.experimental_local_results(var):
        np.testing.assert_array_equal(np.asarray(copy), np.full(2, expected, np.float32))
    assert int(np.asarray(opt.iterations)) == 1
