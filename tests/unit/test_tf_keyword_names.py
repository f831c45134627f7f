"""TF's parameter names, called by keyword (each was spelled differently here, a ported
program's keyword call failed with a ``TypeError``); TF 2.21 / Keras 3.15.1 accept every call
below:

    dist_dataset.reduce(initial_state=0, reduce_func=fn)
    tf.TensorSpec([2]).is_compatible_with(spec_or_tensor=tf.zeros([2]))  # True
    mirrored_variable.assign_add(value=1.0); sync_on_read_variable.assign_sub(value=1.0)
    keras.optimizers.SGD().build(variables=[v])
    tf.data.Dataset.range(3).map(f, synchronous=True, use_unbounded_threadpool=True)
    tf.data.Dataset.range(3).map(f, num_parallel_calls=2, synchronous=True)
      # ValueError ('`synchronous` is not supported with `num_parallel_calls`, but
      #   `num_parallel_calls` was set to ', 2)
"""

from __future__ import annotations

import numpy as np
import pytest

import mwms_mpi
from mwms_mpi import data, optimizers
from mwms_mpi.types import VariableAggregation, VariableSynchronization


@pytest.fixture
def strategy() -> mwms_mpi.distribute.MirroredStrategy:
    return mwms_mpi.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])


def test_distributed_dataset_reduce_func(strategy: mwms_mpi.distribute.MirroredStrategy) -> None:
    dist = strategy.experimental_distribute_dataset(data.Dataset.range(8).batch(4))
    total = dist.reduce(
        initial_state=np.int64(0),
        reduce_func=lambda s, x: s + strategy.reduce("SUM", strategy.run(np.sum, (x,)), None),
    )
    assert total == 28


def test_tensor_spec_spec_or_tensor() -> None:
    assert data.TensorSpec([2]).is_compatible_with(spec_or_tensor=np.zeros(2, np.float32))


def test_distributed_variables_take_value(strategy: mwms_mpi.distribute.MirroredStrategy) -> None:
    with strategy.scope():
        m = mwms_mpi.Variable(1.0)
        s = mwms_mpi.Variable(
            4.0,
            synchronization=VariableSynchronization.ON_READ,
            aggregation=VariableAggregation.MEAN,
        )
    m.assign_add(value=2.0)
    m.assign_sub(value=0.5)
    s.assign_add(value=1.0)
    s.assign_sub(value=2.0)
    assert float(m.numpy()) == 2.5 and float(s.numpy()) == 3.0


def test_optimizer_build_variables(strategy: mwms_mpi.distribute.MirroredStrategy) -> None:
    with strategy.scope():
        v = mwms_mpi.Variable([1.0, 2.0])
        opt = optimizers.SGD(momentum=0.5)
        opt.build(variables=[v])
    assert opt.iterations is not None


def test_map_synchronous_and_threadpool() -> None:
    ds = data.Dataset.range(3)
    got = ds.map(lambda x: x * 2, None, None, True, True)  # TF's positional order
    assert [int(x) for x in got.as_numpy_iterator()] == [0, 2, 4]
    with pytest.raises(ValueError) as info:
        ds.map(lambda x: x, num_parallel_calls=2, synchronous=True)
    assert info.value.args == (
        "`synchronous` is not supported with `num_parallel_calls`, but `num_parallel_calls` "
        "was set to ",
        2,
    )
