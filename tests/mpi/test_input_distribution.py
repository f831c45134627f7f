"""Input distribution at any world size, k=1 and k=2 CPU replicas per rank (issue 6, Input).

Expected streams come from TF 2.21's rule (docs/input_semantics.md), computed serially on every
rank: under AUTO/DATA each global batch of b rows is cut into N = W*k pieces of ceil(b/N) rows
(the last ones shorter or empty) and piece ``j`` goes to worker ``j mod W``, so worker i's local
replica l gets piece ``i + l*W``. Consumed elements are gathered over a test communicator and
compared with the dataset; rank-local datasets of different lengths must end on every worker at
the same step, with empty batches for the replicas that ran out (docs/architecture.md, "Testing").
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

import mwms_mpi.distribute as ds
from mwms_mpi import errors
from mwms_mpi.data import Dataset, Options, TensorSpec
from mwms_mpi.data.experimental import AutoShardPolicy
from mwms_mpi.distribute.input_lib import PerReplicaSpec
from mwms_mpi.values import PerReplica

pytestmark = pytest.mark.mpi


def _shape(s: Any) -> tuple[int, int, int]:
    k = len(s.extended.worker_devices)
    return int(s.extended._id_in_cluster), s.num_replicas_in_sync // k, k


def _local(s: Any, x: Any) -> list[Any]:
    return list(s.experimental_local_results(x))


def _expected_pieces(batch: np.ndarray, workers: int, k: int, worker: int) -> list[np.ndarray]:
    """TF's DATA rule for one global batch: this worker's k pieces, in local replica order."""
    n = workers * k
    size = math.ceil(len(batch) / n)
    pieces = [batch[j * size : (j + 1) * size] for j in range(n)]
    return [pieces[worker + local * workers] for local in range(k)]


def _gather(test_comm: Any, values: list[np.ndarray]) -> np.ndarray:
    parts = test_comm.allgather(np.concatenate(values) if values else np.zeros(0))
    return np.sort(np.concatenate(parts))


# -- experimental_distribute_dataset -----------------------------------------------------------


def test_issue_example_14_items_batch_8(strategy: Any) -> None:
    rank, workers, k = _shape(strategy)
    steps = [
        _local(strategy, x)
        for x in strategy.experimental_distribute_dataset(Dataset.range(14).batch(8))
    ]
    got = [[v.tolist() for v in step] for step in steps]
    if workers == 2 and k == 1:
        # Real TF 2.21, 2 workers x 1 CPU replica (docs/input_semantics.md):
        # W0 range14_b8_AUTO: [[[0, 1, 2, 3]], [[8, 9, 10]]]
        # W1 range14_b8_AUTO: [[[4, 5, 6, 7]], [[11, 12, 13]]]
        assert (
            got == [[[0, 1, 2, 3]], [[8, 9, 10]]] if rank == 0 else [[[4, 5, 6, 7]], [[11, 12, 13]]]
        )
    batches = [np.arange(0, 8), np.arange(8, 14)]
    expected = [[p.tolist() for p in _expected_pieces(b, workers, k, rank)] for b in batches]
    assert got == expected


@pytest.mark.parametrize(
    ("n", "batch", "policy"),
    [
        (14, 8, AutoShardPolicy.AUTO),
        (13, 4, AutoShardPolicy.DATA),
        (10, 8, AutoShardPolicy.DATA),
        (5, 5, AutoShardPolicy.AUTO),
        (3, 16, AutoShardPolicy.DATA),
    ],
)
def test_every_element_once_with_tf_pieces(
    strategy: Any, test_comm: Any, n: int, batch: int, policy: AutoShardPolicy
) -> None:
    rank, workers, k = _shape(strategy)
    options = Options()
    options.experimental_distribute.auto_shard_policy = policy
    features = np.arange(n * 3, dtype=np.float32).reshape(n, 3)
    dataset = (
        Dataset.from_tensor_slices((features, np.arange(n))).batch(batch).with_options(options)
    )
    dist = strategy.experimental_distribute_dataset(dataset)
    consumed: list[np.ndarray] = []
    steps = 0
    for x, y in dist:
        xs, ys = _local(strategy, x), _local(strategy, y)
        global_batch = np.arange(steps * batch, min(n, (steps + 1) * batch))
        for got_y, got_x, want in zip(
            ys, xs, _expected_pieces(global_batch, workers, k, rank), strict=True
        ):
            np.testing.assert_array_equal(got_y, want)
            assert got_x.shape == (len(want), 3) and got_x.dtype == np.float32
            np.testing.assert_array_equal(got_x, features[want])
            consumed.append(got_y)
        steps += 1
    assert steps == math.ceil(n / batch)
    np.testing.assert_array_equal(_gather(test_comm, consumed), np.arange(n))


@pytest.mark.parametrize(("n", "batch"), [(10, 4), (13, 6)])
def test_from_generator_every_element_once_with_tf_pieces(
    strategy: Any, test_comm: Any, n: int, batch: int
) -> None:
    """A generator source is run whole by every worker (DATA sharding, as TF), and each
    worker's replicas get TF's pieces of every global batch."""
    rank, workers, k = _shape(strategy)
    calls = []

    def generate() -> Any:
        calls.append(1)
        for i in range(n):
            yield i, np.full((2,), i, np.float32)

    spec = (TensorSpec((), np.int64), TensorSpec((2,), np.float32))
    dataset = Dataset.from_generator(generate, output_signature=spec).batch(batch)
    consumed: list[np.ndarray] = []
    steps = 0
    for ids, values in strategy.experimental_distribute_dataset(dataset):
        global_batch = np.arange(steps * batch, min(n, (steps + 1) * batch))
        pieces = _expected_pieces(global_batch, workers, k, rank)
        for got_id, got_value, want in zip(
            _local(strategy, ids), _local(strategy, values), pieces, strict=True
        ):
            np.testing.assert_array_equal(got_id, want)
            np.testing.assert_array_equal(got_value, np.repeat(want, 2).reshape(-1, 2))
            consumed.append(got_id)
        steps += 1
    assert steps == math.ceil(n / batch) and calls
    np.testing.assert_array_equal(_gather(test_comm, consumed), np.arange(n))


def test_values_are_per_replica_unless_one_replica_in_all(strategy: Any) -> None:
    # Real TF 2.21: 2 workers x 1 replica: `type_next_k1: PerReplica`, element_spec
    # `PerReplicaSpec(TensorSpec(shape=(None,), dtype=tf.int64, name=None),)`; one worker, one
    # replica: `mwms_world1 type: EagerTensor [0, 1] spec: TensorSpec(shape=(None,), ...)`.
    _, workers, k = _shape(strategy)
    dist = strategy.experimental_distribute_dataset(Dataset.range(8).batch(4, drop_remainder=True))
    first = next(iter(dist))
    if workers == 1 and k == 1:
        assert isinstance(first, np.ndarray)
        assert dist.element_spec == TensorSpec((4,), np.int64)
        return
    assert isinstance(first, PerReplica) and len(first.values) == k
    # Several workers: partial batches are possible, so the batch dim is unknown (TF).
    rows = None if workers > 1 else 4 // k
    assert dist.element_spec == PerReplicaSpec(*[TensorSpec((rows,), np.int64)] * k)


def test_for_loop_with_run_and_reduce_matches_serial(strategy: Any) -> None:
    n, batch = 23, 6
    dist = strategy.experimental_distribute_dataset(
        Dataset.from_tensor_slices(np.arange(n, dtype=np.float64) ** 2).batch(batch)
    )
    sums, counts = [], []
    for x in dist:
        per_replica = strategy.run(lambda v: (v.sum(), np.int64(v.shape[0])), args=(x,))
        sums.append(float(strategy.reduce("SUM", per_replica[0], axis=None)))
        counts.append(int(strategy.reduce("SUM", per_replica[1], axis=None)))
        assert strategy.reduce("MEAN", x, axis=0) == pytest.approx(
            np.mean(np.arange(len(sums) * batch - batch, min(n, len(sums) * batch)) ** 2)
        )
    expected = [np.arange(i, min(n, i + batch)) ** 2 for i in range(0, n, batch)]
    assert sums == [float(e.sum()) for e in expected]
    assert counts == [len(e) for e in expected]
    assert dist.reduce(
        np.float64(0),
        lambda st, x: (
            st + strategy.reduce("SUM", strategy.run(lambda v: v.sum(), args=(x,)), axis=None)
        ),
    ) == float((np.arange(n) ** 2).sum())


def test_end_of_data_get_next_next_and_optional(strategy: Any) -> None:
    dist = strategy.experimental_distribute_dataset(Dataset.range(14).batch(8))
    it = iter(dist)
    it.get_next()
    it.get_next()
    # Real TF 2.21: `get_next_end: tensorflow.python.framework.errors_impl OutOfRangeError
    # '... End of sequence [Op:IteratorGetNext] ...'`, then `next_end: StopIteration`.
    with pytest.raises(errors.OutOfRangeError, match="End of sequence"):
        it.get_next()
    with pytest.raises(StopIteration):
        next(it)
    it = iter(dist)
    assert it.get_next_as_optional().has_value() and it.get_next_as_optional().has_value()
    empty = it.get_next_as_optional()
    # TF: `opt3 False PerReplicaSpec(...)`; get_value: `InvalidArgumentError 'The given optional
    # does not have a value.'`
    assert not empty.has_value() and empty.element_spec == dist.element_spec
    with pytest.raises(errors.InvalidArgumentError, match="does not have a value"):
        empty.get_value()
    assert not it.get_next_as_optional().has_value()  # stays ended, on every rank alike


def test_one_agreement_per_step_and_none_for_infinite(strategy: Any) -> None:
    _, workers, _ = _shape(strategy)
    communicator = strategy.extended.communicator
    it = iter(strategy.experimental_distribute_dataset(Dataset.range(14).batch(8)))
    before = communicator.stats.calls if communicator else 0
    it.get_next()
    it.get_next()
    with pytest.raises(errors.OutOfRangeError):
        it.get_next()
    if workers > 1:
        assert communicator.stats.calls == before + 3
    infinite = iter(strategy.experimental_distribute_dataset(Dataset.range(4).batch(2).repeat()))
    before = communicator.stats.calls if communicator else 0
    for _ in range(5):
        infinite.get_next()
        assert infinite.get_next_as_optional().has_value()
    if workers > 1:
        assert communicator.stats.calls == before  # TF: no partial-batch handling if infinite


def test_get_next_inside_run_raises(strategy: Any) -> None:
    it = iter(strategy.experimental_distribute_dataset(Dataset.range(8).batch(4)))
    # TF: `ValueError 'next(iterator) should be called from outside of replica_fn. ...'`
    with pytest.raises(ValueError, match="outside of replica_fn"):
        strategy.run(lambda: it.get_next())


# -- distribute_datasets_from_function ---------------------------------------------------------


def test_from_function_context_once_per_worker(strategy: Any) -> None:
    rank, workers, k = _shape(strategy)
    contexts: list[ds.InputContext] = []

    def dataset_fn(ctx: ds.InputContext) -> Dataset:
        contexts.append(ctx)
        return (
            Dataset.range(12)
            .shard(ctx.num_input_pipelines, ctx.input_pipeline_id)
            .batch(ctx.get_per_replica_batch_size(2 * strategy.num_replicas_in_sync))
        )

    dist = strategy.distribute_datasets_from_function(dataset_fn)
    assert len(contexts) == 1
    ctx = contexts[0]
    assert (ctx.num_input_pipelines, ctx.input_pipeline_id) == (workers, rank)
    assert ctx.num_replicas_in_sync == strategy.num_replicas_in_sync
    mine = np.arange(12)[rank::workers]
    stream = [mine[i : i + 2] for i in range(0, len(mine), 2)]
    got = [[v.tolist() for v in _local(strategy, x)] for x in dist]
    steps = math.ceil(math.ceil(len(np.arange(12)[0::workers]) / 2) / k)  # worker 0: the most
    assert len(got) == steps
    flat = [v for step in got for v in step]
    assert flat[: len(stream)] == [s.tolist() for s in stream]
    assert all(v == [] for v in flat[len(stream) :])


def test_rank_local_lengths_end_together_with_empty_batches(strategy: Any, test_comm: Any) -> None:
    rank, workers, k = _shape(strategy)
    lengths = [3 + 5 * i for i in range(workers)]
    starts = np.cumsum([0, *lengths])
    per_replica_batch = 2

    def dataset_fn(ctx: ds.InputContext) -> Dataset:
        i = ctx.input_pipeline_id
        ids = np.arange(starts[i], starts[i] + lengths[i])
        features = np.stack([ids, -ids, 2 * ids], axis=1).astype(np.float32)
        return Dataset.from_tensor_slices({"x": features, "id": ids}).batch(per_replica_batch)

    dist = strategy.distribute_datasets_from_function(dataset_fn)
    # TF: `fromfn_element_spec: (PerReplicaSpec(TensorSpec(shape=(None, 3), ...` per component.
    assert dist.element_spec["x"] == (
        PerReplicaSpec(*[TensorSpec((None, 3), np.float32)] * k)
        if workers * k > 1
        else TensorSpec((None, 3), np.float32)
    )
    batches = [math.ceil(n / per_replica_batch) for n in lengths]
    expected_steps = max(math.ceil(b / k) for b in batches)
    consumed, steps, empties = [], 0, 0
    for x in dist:
        ids, xs = _local(strategy, x["id"]), _local(strategy, x["x"])
        for local, (i, f) in enumerate(zip(ids, xs, strict=True)):
            index = steps * k + local  # this replica's batch in the worker's stream
            if index >= batches[rank]:
                # Real TF 2.21, worker 1 of 2 ran out: `[(TensorShape([0, 3]), 'float32'),
                # (TensorShape([0]), 'int32')] tf.Tensor([], shape=(0,), dtype=int32)`
                assert i.shape == (0,) and i.dtype == np.int64
                assert f.shape == (0, 3) and f.dtype == np.float32
                empties += 1
            else:
                np.testing.assert_array_equal(f[:, 0], i)
            consumed.append(i)
        total = strategy.reduce("SUM", strategy.run(lambda v: v["id"].sum(), args=(x,)), axis=None)
        want = sum(
            int(
                np.arange(starts[w], starts[w] + lengths[w])[
                    (steps * k) * per_replica_batch : (steps * k + k) * per_replica_batch
                ].sum()
            )
            for w in range(workers)
        )
        assert int(total) == want
        steps += 1
    assert steps == expected_steps  # the same on every worker
    assert empties == expected_steps * k - batches[rank]
    np.testing.assert_array_equal(_gather(test_comm, consumed), np.arange(starts[-1]))
    step_counts = test_comm.allgather(steps)
    assert step_counts == [expected_steps] * workers


def test_rank_local_lengths_optional_and_get_next(strategy: Any) -> None:
    rank, workers, k = _shape(strategy)
    dist = strategy.distribute_datasets_from_function(
        lambda ctx: Dataset.range(4 * (ctx.input_pipeline_id + 1)).batch(4, drop_remainder=True)
    )
    expected_steps = math.ceil(workers / k)  # worker W-1 has W batches
    it = iter(dist)
    for step in range(expected_steps):
        optional = it.get_next_as_optional()
        assert optional.has_value()
        for local, v in enumerate(_local(strategy, optional.get_value())):
            # Static (4,) batches: TF's dummy is (0,): `drop_uneven: [[0, 1, 2, 3], [], []]`
            assert v.shape == ((4,) if step * k + local <= rank else (0,))
    assert not it.get_next_as_optional().has_value()
    it = iter(dist)
    # One worker with static shapes: TF hands no partial batches from get_next (its
    # `_enable_get_next_as_optional` is off), so a step a replica lacks data for ends it:
    # `mirrored2 fromfn static: ... [[[0, 1], [2, 3]]] OutOfRangeError`.
    for _ in range(expected_steps if workers > 1 else 1 // k):
        it.get_next()
    with pytest.raises(errors.OutOfRangeError):
        it.get_next()


def test_from_function_one_infinite_worker_does_not_hang(strategy: Any) -> None:
    rank, _, k = _shape(strategy)

    def dataset_fn(ctx: ds.InputContext) -> Dataset:
        dataset = Dataset.range(2).batch(1)
        return dataset.repeat() if ctx.input_pipeline_id == 0 else dataset

    it = iter(strategy.distribute_datasets_from_function(dataset_fn))
    for step in range(4):
        for local, v in enumerate(_local(strategy, it.get_next())):
            finite_left = rank > 0 and step * k + local < 2
            assert v.shape == ((1,) if rank == 0 or finite_left else (0,))


# -- options -----------------------------------------------------------------------------------


def test_input_options_as_tf(strategy: Any) -> None:
    per_replica = ds.InputOptions(experimental_replication_mode=ds.InputReplicationMode.PER_REPLICA)
    dataset = Dataset.range(4).batch(2)
    # TF 2.21 MWMS: `opts per_replica eds NotImplementedError 'InputReplicationMode.PER_REPLICA
    # is only supported in `distribute_datasets_from_function` of tf.distribute.MirroredStrategy'`
    with pytest.raises(NotImplementedError, match=r"of tf\.distribute\.MirroredStrategy"):
        strategy.experimental_distribute_dataset(dataset, per_replica)
    with pytest.raises(NotImplementedError, match=r"of tf\.distribute\.MirroredStrategy"):
        strategy.distribute_datasets_from_function(lambda ctx: dataset, per_replica)
    on_device = ds.InputOptions(experimental_place_dataset_on_device=True)
    # TF: `opts place_on_dev dff ValueError 'When `experimental_place_dataset_on_device` is set
    # for dataset placement, you must also specify `PER_REPLICA` for the replication mode'`
    with pytest.raises(ValueError, match="must also specify `PER_REPLICA`"):
        strategy.distribute_datasets_from_function(lambda ctx: dataset, on_device)
    # ... while experimental_distribute_dataset accepts it (`opts place_on_dev eds ok`).
    got = [
        _local(strategy, x) for x in strategy.experimental_distribute_dataset(dataset, on_device)
    ]
    assert len(got) == 2
    no_fetch = ds.InputOptions(experimental_fetch_to_device=False)
    got = [
        _local(strategy, x)
        for x in strategy.distribute_datasets_from_function(lambda ctx: dataset, no_fetch)
    ]
    assert [v.tolist() for v in got[0]] == [[0, 1], [2, 3]][: len(got[0])]


def test_empty_optional_keeps_the_static_spec(strategy: Any) -> None:
    # TF reports the batch dimension None with partial batches across workers (element_spec
    # of the dataset and the iterator), but the empty optional at the end carries the static
    # spec (input_lib.py: Optional.empty(self._element_spec)). TF 2.21, 2 workers x 1 CPU,
    # distribute_datasets_from_function(range(10).batch(3, drop_remainder=True)): element_spec
    # PerReplicaSpec(TensorSpec(shape=(None,), dtype=tf.int64)), the empty optional's
    # PerReplicaSpec(TensorSpec(shape=(3,), dtype=tf.int64)).
    _, workers, k = _shape(strategy)
    dist = strategy.distribute_datasets_from_function(
        lambda _: Dataset.range(10).batch(3, drop_remainder=True)
    )
    iterator = iter(dist)
    while (optional := iterator.get_next_as_optional()).has_value():
        pass
    static = TensorSpec((3,), np.int64)
    dynamic = TensorSpec((None,), np.int64) if workers > 1 else static

    def wrap(spec: TensorSpec) -> Any:
        return PerReplicaSpec(*[spec] * k) if workers * k > 1 else spec

    assert dist.element_spec == iterator.element_spec == wrap(dynamic)
    assert optional.element_spec == wrap(static)
