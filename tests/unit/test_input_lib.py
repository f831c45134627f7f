"""Input distribution in one process: MirroredStrategy with 1 and 2 CPU replicas, as TF 2.21.

The literal outputs quoted below were printed by TF 2.21 (``MirroredStrategy`` on two logical
CPUs, ``tf.config.set_logical_device_configuration``), iterating eagerly and printing
``experimental_local_results`` per step.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import mwms_mpi.distribute as ds
from mwms_mpi import errors
from mwms_mpi.data import Dataset, Options, TensorSpec
from mwms_mpi.data.experimental import AutoShardPolicy
from mwms_mpi.distribute.input_lib import (
    DistributedDatasetsFromFunction,
    Optional,
    PerReplicaSpec,
)
from mwms_mpi.values import PerReplica


@pytest.fixture(scope="module")
def ms1() -> ds.MirroredStrategy:
    return ds.MirroredStrategy(["/cpu:0"])


@pytest.fixture(scope="module")
def ms2() -> ds.MirroredStrategy:
    return ds.MirroredStrategy(["/cpu:0", "/cpu:1"])


def _steps(s: Any, dist: Any) -> list[list[Any]]:
    return [[v.tolist() for v in s.experimental_local_results(x)] for x in dist]


def test_one_replica_gives_plain_arrays(ms1: Any) -> None:
    # TF: `mirrored1: EagerTensor TensorSpec(shape=(None,), dtype=tf.int64, name=None)`
    dist = ms1.experimental_distribute_dataset(Dataset.range(5).batch(2))
    first = next(iter(dist))
    assert isinstance(first, np.ndarray) and first.tolist() == [0, 1]
    assert dist.element_spec == TensorSpec((None,), np.int64)
    # TF (size-1 MWMS, the same rule): `mwms_world1 all: [[0, 1], [2, 3], [4]]`
    assert [x.tolist() for x in dist] == [[0, 1], [2, 3], [4]]
    assert isinstance(dist, ds.DistributedDataset)
    assert isinstance(iter(dist), ds.DistributedIterator)


def test_two_replicas_split_the_global_batch(ms2: Any) -> None:
    dist = ms2.experimental_distribute_dataset(Dataset.range(5).batch(2))
    # TF: `mirrored2 type: PerReplica spec: PerReplicaSpec(TensorSpec(shape=(None,), ...),
    # TensorSpec(shape=(None,), ...))`, `mirrored2 all: [[[0], [1]], [[2], [3]], [[4], []]]`
    assert isinstance(next(iter(dist)), PerReplica)
    assert dist.element_spec == PerReplicaSpec(*[TensorSpec((None,), np.int64)] * 2)
    assert _steps(ms2, dist) == [[[0], [1]], [[2], [3]], [[4], []]]
    # Each iteration starts afresh (TF: `twice: [[0, 1], [2, 3]] [[0, 1], [2, 3]]`).
    assert _steps(ms2, dist) == [[[0], [1]], [[2], [3]], [[4], []]]


def test_static_global_batch(ms2: Any) -> None:
    dist = ms2.experimental_distribute_dataset(Dataset.range(8).batch(4, drop_remainder=True))
    # TF: `mirrored2 static spec: PerReplicaSpec(TensorSpec(shape=(2,), ...), TensorSpec(shape=
    # (2,), ...)) [[[0, 1], [2, 3]], [[4, 5], [6, 7]]]`
    assert dist.element_spec == PerReplicaSpec(*[TensorSpec((2,), np.int64)] * 2)
    assert _steps(ms2, dist) == [[[0, 1], [2, 3]], [[4, 5], [6, 7]]]
    assert dist.cardinality == 2


def test_unbatched_dataset(ms1: Any, ms2: Any) -> None:
    # TF: `mwms1 unbatched: [0, 1, 2]`, `mirrored2 unbatched: IndexError 'list index out of range'`
    assert [x.tolist() for x in ms1.experimental_distribute_dataset(Dataset.range(3))] == [0, 1, 2]
    with pytest.raises(IndexError, match="list index out of range"):
        ms2.experimental_distribute_dataset(Dataset.range(3))


def test_from_function_partial_and_empty_batches(ms2: Any) -> None:
    contexts: list[ds.InputContext] = []

    def dataset_fn(ctx: ds.InputContext) -> Dataset:
        contexts.append(ctx)
        return Dataset.range(5).batch(2)

    dist = ms2.distribute_datasets_from_function(dataset_fn)
    assert isinstance(dist, DistributedDatasetsFromFunction)
    # TF: `ctx tf.distribute.InputContext(input pipeline id 0, total: 1) 2`
    assert [str(c) for c in contexts] == [
        "tf.distribute.InputContext(input pipeline id 0, total: 1)"
    ]
    assert contexts[0].num_replicas_in_sync == 2
    # TF: `mirrored2 fromfn: PerReplicaSpec(... (None,) ..., ... (None,) ...) [[[0, 1], [2, 3]],
    # [[4], []]]`; `card fromfn 3`
    assert _steps(ms2, dist) == [[[0, 1], [2, 3]], [[4], []]]
    assert dist.cardinality == 3


def test_from_function_static_shapes_end_get_next_early(ms2: Any) -> None:
    dist = ms2.distribute_datasets_from_function(
        lambda ctx: Dataset.range(6).batch(2, drop_remainder=True)
    )
    it = iter(dist)
    # TF: `mirrored2 fromfn static: PerReplicaSpec(TensorSpec(shape=(2,), ...), ...)
    # [[[0, 1], [2, 3]]] OutOfRangeError`
    assert dist.element_spec == PerReplicaSpec(*[TensorSpec((2,), np.int64)] * 2)
    assert [v.tolist() for v in ms2.experimental_local_results(it.get_next())] == [[0, 1], [2, 3]]
    with pytest.raises(errors.OutOfRangeError):
        it.get_next()
    # ... while get_next_as_optional hands out a dummy: `mirrored2 fromfn static optional:
    # [[[0, 1], [2, 3]], [[4, 5], []]]`, the dummy of a static (2,) spec being (0,).
    it = iter(dist)
    got = []
    while (optional := it.get_next_as_optional()).has_value():
        got.append(ms2.experimental_local_results(optional.get_value()))
    assert [[v.tolist() for v in step] for step in got] == [[[0, 1], [2, 3]], [[4, 5], []]]
    assert got[1][1].shape == (0,) and got[1][1].dtype == np.int64


def test_dict_elements_and_dummy_shape(ms2: Any) -> None:
    dist = ms2.distribute_datasets_from_function(
        lambda ctx: Dataset.from_tensor_slices({"a": np.arange(6.0).reshape(3, 2)}).batch(1)
    )
    steps = list(dist)
    # TF: `dict type dict PerReplica`; `dict: [[{'a': [[0.0, 1.0]]}, {'a': [[2.0, 3.0]]}],
    # [{'a': [[4.0, 5.0]]}, {'a': []}]]`
    assert isinstance(steps[0], dict) and isinstance(steps[0]["a"], PerReplica)
    last = ms2.experimental_local_results(steps[1]["a"])
    assert last[0].tolist() == [[4.0, 5.0]]
    assert last[1].shape == (0, 2) and last[1].dtype == np.float64


def test_end_and_optional(ms1: Any) -> None:
    it = iter(ms1.experimental_distribute_dataset(Dataset.range(4).batch(2)))
    first = it.get_next_as_optional()
    # TF: `opt type (<class '..._OptionalImpl'>, <class '...Optional'>, ...)` with element_spec
    # `TensorSpec(shape=(2,), dtype=tf.int64, name=None)` (the spec of the value).
    assert isinstance(first, Optional) and bool(first.has_value())
    assert first.element_spec == TensorSpec((2,), np.int64)
    assert it.get_next().tolist() == [2, 3]
    with pytest.raises(errors.OutOfRangeError, match="End of sequence"):
        it.get_next()
    with pytest.raises(StopIteration):
        next(it)
    empty = it.get_next_as_optional()
    assert not empty.has_value() and empty.has_value().dtype == np.bool_
    with pytest.raises(errors.InvalidArgumentError, match="does not have a value"):
        empty.get_value()
    # TF: `empty opt False` for an empty dataset on one worker.
    dist = ms1.distribute_datasets_from_function(lambda ctx: Dataset.range(0).batch(2))
    assert not iter(dist).get_next_as_optional().has_value()


def test_reduce_over_the_dataset(ms2: Any) -> None:
    dist = ms2.experimental_distribute_dataset(Dataset.range(14).batch(8))

    def step(state: Any, x: Any) -> Any:
        return state + ms2.reduce("SUM", ms2.run(lambda v: v.sum(), args=(x,)), axis=None)

    # TF (2 workers): `reduce: tf.Tensor(91, shape=(), dtype=int64)`
    assert dist.reduce(np.int64(0), step) == 91


def test_get_next_inside_run(ms2: Any) -> None:
    it = iter(ms2.experimental_distribute_dataset(Dataset.range(8).batch(4)))
    with pytest.raises(ValueError, match="outside of replica_fn"):
        ms2.run(lambda: it.get_next())


def test_per_replica_replication_mode(ms2: Any) -> None:
    options = ds.InputOptions(experimental_replication_mode=ds.InputReplicationMode.PER_REPLICA)
    contexts: list[str] = []

    def dataset_fn(ctx: ds.InputContext) -> Dataset:
        contexts.append(str(ctx))
        i = ctx.input_pipeline_id
        return Dataset.range(i * 10, i * 10 + 2 + i * 2).batch(2)

    dist = ms2.distribute_datasets_from_function(dataset_fn, options)
    # TF: `ctx tf.distribute.InputContext(input pipeline id 0, total: 2) 2` (and id 1), then
    # `per_replica PerReplicaSpec(...) [[[0, 1], [10, 11]], [[], [12, 13]]]`
    assert contexts == [
        "tf.distribute.InputContext(input pipeline id 0, total: 2)",
        "tf.distribute.InputContext(input pipeline id 1, total: 2)",
    ]
    assert _steps(ms2, dist) == [[[0, 1], [10, 11]], [[], [12, 13]]]
    # TF: `eds per_replica NotImplementedError 'InputReplicationMode.PER_REPLICA is only
    # supported in `distribute_datasets_from_function`.'`
    with pytest.raises(NotImplementedError, match="only supported in"):
        ms2.experimental_distribute_dataset(Dataset.range(4).batch(2), options)
    # TF: `pr_place ValueError '`experimental_place_dataset_on_device` can not be set to True
    # when experimental_fetch_to_device is True and replication mode is set to `PER_REPLICA`'`
    on_device = options._replace(experimental_place_dataset_on_device=True)
    with pytest.raises(ValueError, match="can not be set to True"):
        ms2.distribute_datasets_from_function(dataset_fn, on_device)
    no_fetch = on_device._replace(experimental_fetch_to_device=False)
    assert _steps(ms2, ms2.distribute_datasets_from_function(dataset_fn, no_fetch))[0] == [
        [0, 1],
        [10, 11],
    ]


def test_specs_and_optional_pieces() -> None:
    spec = PerReplicaSpec(TensorSpec((None,), np.int64))
    # TF: `PerReplicaSpec(TensorSpec(shape=(None,), dtype=tf.int64, name=None),)`
    assert repr(spec) == "PerReplicaSpec(TensorSpec(shape=(None,), dtype=int64, name=None),)"
    assert spec == PerReplicaSpec(TensorSpec((None,), np.int64)) and hash(spec) == hash(
        PerReplicaSpec(TensorSpec((None,), np.int64))
    )
    value = Optional.from_value((np.zeros(3, np.float32), PerReplica((np.ones(2), np.ones(1)))))
    assert value.element_spec == (
        TensorSpec((3,), np.float32),
        PerReplicaSpec(TensorSpec((2,), np.float64), TensorSpec((1,), np.float64)),
    )
    assert not Optional.empty(spec).has_value() and Optional.empty(spec).element_spec == spec


def test_file_policy_at_one_worker_shards_nothing(ms2: Any) -> None:
    # TF's AutoShard skips FILE at one worker, index 0 (auto_shard.cc's OptimizeGraph), so a
    # range() source does not fail and the rebatch is not made a legacy one. TF 2.21, M2:
    # `range(7).batch(3)` FILE: [[[0, 1], [2]], [[3, 4], [5]], [[6], []]];
    # `range(10).batch(4).rebatch(3)` FILE: [[[0, 1], [2]], [[3, 4], [5]], [[6, 7], [8]],
    # [[9], []]]
    options = Options()
    options.experimental_distribute.auto_shard_policy = AutoShardPolicy.FILE
    dist = ms2.experimental_distribute_dataset(Dataset.range(7).batch(3).with_options(options))
    assert _steps(ms2, dist) == [[[0, 1], [2]], [[3, 4], [5]], [[6], []]]
    rebatched = Dataset.range(10).batch(4).rebatch(3).with_options(options)
    assert _steps(ms2, ms2.experimental_distribute_dataset(rebatched)) == [
        [[0, 1], [2]],
        [[3, 4], [5]],
        [[6, 7], [8]],
        [[9], []],
    ]


def test_default_strategy_iterator_get_next_as_optional() -> None:
    # The default strategy distributes a dataset as itself; TF 2.21's iterator of it has
    # get_next_as_optional, whose spec is the iterator's (TF: `_OptionalImpl True
    # TensorSpec(shape=(None,), dtype=tf.int64, name=None) [0, 1]`, `... True ... [2]`, then
    # `False TensorSpec(shape=(None,), ...)` twice, get_value: InvalidArgumentError 'The given
    # optional does not have a value.', next(): StopIteration).
    strategy = ds.get_strategy()
    it = iter(strategy.experimental_distribute_dataset(Dataset.range(3).batch(2)))
    spec = TensorSpec((None,), np.int64)
    values = []
    for _ in range(4):
        optional = it.get_next_as_optional()
        assert optional.element_spec == spec
        values.append(optional.get_value().tolist() if optional.has_value() else None)
    assert values == [[0, 1], [2], None, None]
    with pytest.raises(errors.InvalidArgumentError, match="does not have a value"):
        optional.get_value()
    with pytest.raises(StopIteration):
        next(it)


def test_batch_shape_error_message_through_the_distributed_iterator(ms2: Any) -> None:
    # TF 2.21 writes the shapes without spaces: `InvalidArgumentError 'Cannot batch tensors with
    # different shapes in component 0. First element had shape [3,2] and element 1 had shape
    # [1,2].'`
    rows = Dataset.from_tensor_slices(np.zeros((4, 2), np.float32)).batch(3)
    dist = ms2.experimental_distribute_dataset(rows.batch(2))
    with pytest.raises(errors.InvalidArgumentError) as raised:
        next(iter(dist))
    assert str(raised.value) == (
        "Cannot batch tensors with different shapes in component 0. First element had shape "
        "[3,2] and element 1 had shape [1,2]."
    )


def test_global_batch_of_zero_rows(ms2: Any) -> None:
    # Elements of zero rows: TF rebatches them with batch sizes [0, 0], which AUTO/DATA
    # sharding makes a legacy rebatch, so each replica gets an empty piece. TF 2.21, M2,
    # from_tensor_slices(zeros((2, 0), float32)): element_spec PerReplicaSpec(TensorSpec(
    # shape=(0,), dtype=tf.float32), TensorSpec(shape=(0,), ...)), 2 steps of ([], []).
    dist = ms2.experimental_distribute_dataset(
        Dataset.from_tensor_slices(np.zeros((2, 0), np.float32))
    )
    assert dist.element_spec == PerReplicaSpec(*[TensorSpec((0,), np.float32)] * 2)
    assert _steps(ms2, dist) == [[[], []], [[], []]]
