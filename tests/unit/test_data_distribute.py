"""Auto-shard and rebatch per worker, against TF 2.21 (docs/input_semantics.md).

Expected streams were printed by real TF: a 2-worker MultiWorkerMirroredStrategy on 127.0.0.1
(TF_CONFIG, one CPU replica each, ``experimental_distribute_dataset``, ``for x in dist``), and,
for k > 1 replicas per worker, by running TF's own per-worker construction in one process:
``input_ops.auto_shard_dataset(ds.rebatch(distribute.batch_sizes_for_worker(...)), W, i, W*R)``
(which reproduces the 2-worker run exactly).
"""

from __future__ import annotations

import numpy as np
import pytest

from mwms_mpi import errors
from mwms_mpi.data import Dataset, Options, TensorSpec
from mwms_mpi.data import distribute as dd
from mwms_mpi.data.experimental import AutoShardPolicy


def with_policy(ds: Dataset, policy: AutoShardPolicy) -> Dataset:
    options = Options()
    options.experimental_distribute.auto_shard_policy = policy
    return ds.with_options(options)


def streams(ds: Dataset, workers: int, per_worker: int) -> list[list[list[int]]]:
    return [
        [
            np.asarray(x).tolist()
            for x in dd.dataset_for_worker(ds, workers, i, workers * per_worker)
        ]
        for i in range(workers)
    ]


@pytest.mark.parametrize("policy", [AutoShardPolicy.AUTO, AutoShardPolicy.DATA])
def test_issue_example_two_workers(policy: AutoShardPolicy) -> None:
    # Real TF, 2 workers: W0 range14_b8: [[[0, 1, 2, 3]], [[8, 9, 10]]]
    #                     W1 range14_b8: [[[4, 5, 6, 7]], [[11, 12, 13]]]
    ds = with_policy(Dataset.range(14).batch(8), policy)
    assert streams(ds, 2, 1) == [[[0, 1, 2, 3], [8, 9, 10]], [[4, 5, 6, 7], [11, 12, 13]]]


def test_data_policy_two_workers_like_tf() -> None:
    data = AutoShardPolicy.DATA
    # Real TF, 2 workers (W0 / W1):
    # range13_b4: [[0,1]],[[4,5]],[[8,9]],[[12]] / [[2,3]],[[6,7]],[[10,11]],[[]]
    assert streams(with_policy(Dataset.range(13).batch(4), data), 2, 1) == [
        [[0, 1], [4, 5], [8, 9], [12]],
        [[2, 3], [6, 7], [10, 11], []],
    ]
    # range14_b7: [[0,1,2,3]],[[7,8,9,10]] / [[4,5,6]],[[11,12,13]]
    assert streams(with_policy(Dataset.range(14).batch(7), data), 2, 1) == [
        [[0, 1, 2, 3], [7, 8, 9, 10]],
        [[4, 5, 6], [11, 12, 13]],
    ]
    # range1_b8: [[0]] / [[]];  range14_b8_drop: [[0,1,2,3]] / [[4,5,6,7]]
    assert streams(with_policy(Dataset.range(1).batch(8), data), 2, 1) == [[[0]], [[]]]
    drop = with_policy(Dataset.range(14).batch(8, drop_remainder=True), data)
    assert streams(drop, 2, 1) == [[[0, 1, 2, 3]], [[4, 5, 6, 7]]]
    # range14_repeat2_b8: [[0..3]],[[8..11]],[[2..5]],[[10,11]] / [[4..7]],[[12,13,0,1]],...
    rep = streams(with_policy(Dataset.range(14).repeat(2).batch(8), data), 2, 1)
    assert rep == [
        [[0, 1, 2, 3], [8, 9, 10, 11], [2, 3, 4, 5], [10, 11]],
        [[4, 5, 6, 7], [12, 13, 0, 1], [6, 7, 8, 9], [12, 13]],
    ]
    # range14_map_b8: [[0,10,20,30]],[[80,90,100]] / [[40,50,60,70]],[[110,120,130]]
    mapped = with_policy(Dataset.range(14).map(lambda x: x * 10).batch(8), data)
    assert streams(mapped, 2, 1)[1] == [[40, 50, 60, 70], [110, 120, 130]]


def test_off_policy_like_tf() -> None:
    # Real TF, 2 workers, OFF: both [[0,1,2,3]],[[4,5,6,7]],[[8,9,10,11]],[[12,13]]
    off = with_policy(Dataset.range(14).batch(8), AutoShardPolicy.OFF)
    expected = [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11], [12, 13]]
    assert streams(off, 2, 1) == [expected, expected]
    # TF (per-worker construction), W=2 R=2, range(14).batch(7), OFF: sizes [2,2,2,1] / [2,1,2,2]
    off7 = with_policy(Dataset.range(14).batch(7), AutoShardPolicy.OFF)
    assert streams(off7, 2, 2) == [
        [[0, 1], [2, 3], [4, 5], [6], [7, 8], [9, 10], [11, 12], [13]],
        [[0, 1], [2], [3, 4], [5, 6], [7, 8], [9], [10, 11], [12, 13]],
    ]


def test_several_replicas_per_worker_like_tf() -> None:
    data = AutoShardPolicy.DATA
    # TF, W=2 R=2 range14_b8 DATA: [[0,1],[4,5],[8,9],[12,13]] / [[2,3],[6,7],[10,11],[]]
    assert streams(with_policy(Dataset.range(14).batch(8), data), 2, 2) == [
        [[0, 1], [4, 5], [8, 9], [12, 13]],
        [[2, 3], [6, 7], [10, 11], []],
    ]
    # TF, W=1 R=4 range5_b5 DATA: [[0,1],[2,3],[4],[]]; OFF: [[0,1],[2],[3],[4]]
    assert streams(with_policy(Dataset.range(5).batch(5), data), 1, 4) == [
        [[0, 1], [2, 3], [4], []]
    ]
    off = with_policy(Dataset.range(5).batch(5), AutoShardPolicy.OFF)
    assert streams(off, 1, 4) == [[[0, 1], [2], [3], [4]]]
    # TF, W=4 R=1 range10_b8 DATA: [[0,1],[8]] / [[2,3],[9]] / [[4,5],[]] / [[6,7],[]]
    assert streams(with_policy(Dataset.range(10).batch(8), data), 4, 1) == [
        [[0, 1], [8]],
        [[2, 3], [9]],
        [[4, 5], []],
        [[6, 7], []],
    ]
    # TF, W=3 R=1 range20_b6 DATA: [[0,1],[6,7],[12,13],[18]] / ... / [[4,5],[10,11],[16,17],[]]
    assert streams(with_policy(Dataset.range(20).batch(6), data), 3, 1)[2] == [
        [4, 5],
        [10, 11],
        [16, 17],
        [],
    ]


def test_every_element_exactly_once_under_data() -> None:
    for workers, per_worker in [(1, 2), (2, 1), (2, 2), (3, 1), (4, 1), (3, 2)]:
        for n, batch in [(14, 8), (13, 4), (5, 5), (30, 7)]:
            ds = with_policy(Dataset.range(n).batch(batch), AutoShardPolicy.DATA)
            seen = [v for worker in streams(ds, workers, per_worker) for b in worker for v in b]
            assert sorted(seen) == list(range(n)), (workers, per_worker, n, batch)


def test_batch_sizes_for_worker_like_tf() -> None:
    # TF docstring: G=7, W=2, R=2 -> worker 0 [2, 2, 2, 1], worker 1 [2, 1, 2, 2]
    assert dd.batch_sizes_for_worker(7, 2, 2, 0) == [2, 2, 2, 1]
    assert dd.batch_sizes_for_worker(7, 2, 2, 1) == [2, 1, 2, 2]
    # TF: G=5, W=4, R=1 -> [2,1,1,1], [1,1,1,2], [1,1,2,1], [1,2,1,1]
    assert [dd.batch_sizes_for_worker(5, 4, 1, i) for i in range(4)] == [
        [2, 1, 1, 1],
        [1, 1, 1, 2],
        [1, 1, 2, 1],
        [1, 2, 1, 1],
    ]


def test_compute_batch_size_like_tf() -> None:
    ds = Dataset.range(14).batch(8)
    # TF: batch 8, map -1, batch.batch(2) 2, filter/repeat/take/skip/shuffle/prefetch/cache/
    # shard 8, drop 8, drop.map 8, map-then-batch 8, from_tensors(zeros((8, 3))) 8
    assert dd.compute_batch_size(ds) == 8
    assert dd.compute_batch_size(ds.map(lambda x: x)) == -1
    assert dd.compute_batch_size(ds.batch(2)) == 2
    for op in (
        lambda d: d.filter(lambda x: True),
        lambda d: d.repeat(),
        lambda d: d.take(1),
        lambda d: d.skip(1),
        lambda d: d.shuffle(3, seed=0),
        lambda d: d.prefetch(3),
        lambda d: d.cache(),
        lambda d: d.shard(2, 0),
    ):
        assert dd.compute_batch_size(op(ds)) == 8
    assert dd.compute_batch_size(Dataset.range(14).batch(8, True).map(lambda x: x)) == 8
    assert dd.compute_batch_size(Dataset.range(14).map(lambda x: x).batch(8)) == 8
    assert dd.compute_batch_size(Dataset.from_tensors(np.zeros((8, 3)))) == 8
    assert dd.compute_batch_size(Dataset.range(3).batch(1).map(lambda x: x)) == -1
    # TF: an unbatched dataset fails in compute_batch_size with IndexError
    with pytest.raises(IndexError):
        dd.compute_batch_size(Dataset.range(14))
    with pytest.raises(IndexError):
        dd.dataset_for_worker(Dataset.range(14), 2, 0, 2)


def test_zip_and_concatenate_take_their_inputs_batch_size_like_tf() -> None:
    # TF's ComputeBatchSize walks into every input of a zip or a concatenation and keeps their
    # batch size where they all agree (TF 2.21's compute_batch_size: 8, -1, 4, -1, 8).
    def evens(start: int) -> Dataset:
        return Dataset.range(start, start + 14)

    assert dd.compute_batch_size(Dataset.zip((evens(0).batch(8), evens(100).batch(8)))) == 8
    assert dd.compute_batch_size(Dataset.zip((evens(0).batch(8), evens(100).batch(4)))) == -1
    concat = Dataset.range(8).batch(4).concatenate(Dataset.range(8, 14).batch(4))
    assert dd.compute_batch_size(concat) == 4
    mapped = Dataset.zip((evens(0).batch(8), evens(0).batch(8).map(lambda x: x)))
    assert dd.compute_batch_size(mapped) == -1
    assert dd.compute_batch_size(Dataset.zip((evens(0), evens(0))).batch(8)) == 8
    # TF's per-worker construction under OFF: the rebatch by sizes, not the legacy one (which
    # split each batch of 4, 4, 4, 2 in two, a step more, and a last global batch 3 / 3).
    off = AutoShardPolicy.OFF
    whole = [[0, 1], [2, 3], [4, 5], [6, 7], [8, 9], [10, 11], [12, 13]]
    assert streams(with_policy(concat, off), 2, 1) == [whole, whole]
    assert streams(with_policy(concat, off), 1, 2) == [whole]
    singles = [[i] for i in range(14)]
    assert streams(with_policy(concat, off), 2, 2) == [singles, singles]
    zipped = with_policy(Dataset.zip((evens(0).batch(8), evens(100).batch(8))), off)
    per_worker = [
        [[0, 1, 2, 3], [100, 101, 102, 103]],
        [[4, 5, 6, 7], [104, 105, 106, 107]],
        [[8, 9, 10, 11], [108, 109, 110, 111]],
        [[12, 13], [112, 113]],
    ]
    assert streams(zipped, 2, 1) == [per_worker, per_worker]
    assert streams(zipped, 1, 2) == [per_worker]
    # AUTO ends with the legacy rebatch either way (TF: the same streams as before)
    assert streams(with_policy(concat, AutoShardPolicy.AUTO), 2, 1) == [
        [[0, 1], [4, 5], [8, 9], [12]],
        [[2, 3], [6, 7], [10, 11], [13]],
    ]


def test_only_the_rebatch_at_the_end_becomes_a_legacy_one_like_tf() -> None:
    # TF's ShardByData rewrites the RebatchDatasetV2 just above the sink (below trailing
    # prefetches): the one tf.distribute added. A user's own rebatch upstream is kept.
    user = with_policy(Dataset.range(14).batch(8).rebatch([3, 5]), AutoShardPolicy.AUTO)
    assert streams(user, 2, 1) == [  # TF 2.21, 2 workers
        [[0, 1], [3, 4, 5], [8, 9], [11, 12]],
        [[2], [6, 7], [10], [13]],
    ]
    assert streams(user, 1, 2) == [[[0, 1], [2], [3, 4, 5], [6, 7], [8, 9], [10], [11, 12], [13]]]
    assert streams(user, 2, 2) == [
        [[0], [2], [3, 4], [7], [8], [10], [11], [13]],
        [[1], [], [5, 6], [], [9], [], [12], []],
    ]
    # One replica: nothing is added, so the user's rebatch is the one at the end, and it
    # becomes the legacy rebatch over 1 replica: the batches before it come back (TF 2.21,
    # MirroredStrategy on one CPU). A map after it, or OFF, keeps it.
    batches = [[0, 1, 2, 3, 4, 5, 6, 7], [8, 9, 10, 11, 12, 13]]
    rebatched = [[0, 1, 2], [3, 4, 5, 6, 7], [8, 9, 10], [11, 12, 13]]
    assert streams(user, 1, 1) == [batches]
    assert streams(user.prefetch(1).prefetch(2), 1, 1) == [batches]
    assert streams(user.map(lambda x: x), 1, 1) == [rebatched]
    assert streams(with_policy(user, AutoShardPolicy.OFF), 1, 1) == [rebatched]


def test_an_empty_rebatch_piece_has_its_unknown_dims_zero_like_tf() -> None:
    # TF's RebatchDatasetV2 makes a piece of size 0 with every unknown dim 0:
    # range(7).batch(3).batch(1).rebatch([1, 0]) -> (1, 3), (0, 0), (1, 3), (0, 0), (1, 1), (0, 0)
    nested = Dataset.range(7).batch(3).batch(1)
    shapes = [x.shape for x in nested.rebatch([1, 0])]
    assert shapes == [(1, 3), (0, 0), (1, 3), (0, 0), (1, 1), (0, 0)]
    # ... which OFF over 2 replicas builds (it raised TypeError: a None dim)
    off = with_policy(nested, AutoShardPolicy.OFF)
    pieces = list(dd.dataset_for_worker(off, 1, 0, 2))
    assert [x.shape for x in pieces] == shapes
    assert [x.tolist() for x in pieces[::2]] == [[[0, 1, 2]], [[3, 4, 5]], [[6]]]


def test_legacy_rebatch_like_tf() -> None:
    # TF _LegacyRebatchDataset: 5/4 [[0,1],[2,3],[4],[]]; 9/4 [[0,1,2],[3,4,5],[6,7,8],[]];
    # 10/4 [[0,1,2],[3,4,5],[6,7,8],[9]]; 3/4 [[0],[1],[2],[]]
    def legacy(n: int, parts: int) -> list[list[int]]:
        return [x.tolist() for x in dd.legacy_rebatch(Dataset.range(n).batch(n), parts)]

    assert legacy(5, 4) == [[0, 1], [2, 3], [4], []]
    assert legacy(9, 4) == [[0, 1, 2], [3, 4, 5], [6, 7, 8], []]
    assert legacy(10, 4) == [[0, 1, 2], [3, 4, 5], [6, 7, 8], [9]]
    assert legacy(3, 4) == [[0], [1], [2], []]
    # TF specs: drop-8 over 4 -> (2,); drop-7 over 4 -> (None,); non-drop -> (None,)
    assert dd.legacy_rebatch(Dataset.range(16).batch(8, True), 4).element_spec.shape == (2,)
    assert dd.legacy_rebatch(Dataset.range(16).batch(7, True), 4).element_spec.shape == (None,)
    # TF: tuple elements split alike: [([0, 1, 2], [0.0, 10.0, 20.0]), ([3, 4], [30.0, 40.0])]
    pairs = Dataset.from_tensor_slices((np.arange(5), np.arange(5.0) * 10)).batch(5)
    out = [tuple(a.tolist() for a in x) for x in dd.legacy_rebatch(pairs, 2)]
    assert out == [([0, 1, 2], [0.0, 10.0, 20.0]), ([3, 4], [30.0, 40.0])]
    # TF: ValueError 'Invalid `input_dataset`. Expected a dataset whose elements have rank >= 1'
    with pytest.raises(ValueError, match="elements have rank >= 1"):
        dd.legacy_rebatch(Dataset.range(5), 2)


def test_other_policies_like_tf() -> None:
    # TF FILE on range(): NotFoundError 'Found an unshardable source dataset: ...' on iteration
    ds = dd.auto_shard_dataset(with_policy(Dataset.range(10), AutoShardPolicy.FILE), 3, 1, 3)
    with pytest.raises(errors.NotFoundError, match="Found an unshardable source dataset"):
        list(ds)
    # TF HINT without SHARD_HINT placeholders: every element ([0, ..., 9])
    hint = dd.auto_shard_dataset(with_policy(Dataset.range(10), AutoShardPolicy.HINT), 3, 1, 3)
    assert [int(x) for x in hint] == list(range(10))
    # TF DATA: shard at the end, before a final prefetch: range(10).prefetch(2) -> [1, 4, 7]
    data = dd.auto_shard_dataset(Dataset.range(10).prefetch(2), 3, 1, 3)
    assert [int(x) for x in data] == [1, 4, 7]


def test_replicas_not_divisible_by_workers() -> None:
    # TF's ValueError from _make_rebatch_fn
    with pytest.raises(ValueError, match=r"`num_replicas_in_sync` \(3\) that cannot be divided"):
        dd.dataset_for_worker(Dataset.range(8).batch(4), 2, 0, 3)


def test_auto_shard_keeps_the_input_spec() -> None:
    # TF's _AutoShardDataset reports its input's element_spec, whatever the rewrite: a user's
    # rebatch made a legacy one keeps the rebatch's spec. TF 2.21, MultiWorkerMirroredStrategy
    # at one worker, `from_tensors(zeros(16)).rebatch([1, 1, 2], drop_remainder=True)`:
    # dataset and distributed spec TensorSpec(shape=(None,), dtype=tf.float64), one element
    # of shape [16].
    dataset = Dataset.from_tensors(np.zeros(16)).rebatch([1, 1, 2], drop_remainder=True)
    sharded = dd.auto_shard_dataset(dataset, 1, 0, 1)
    assert sharded.element_spec == TensorSpec((None,), np.float64) == dataset.element_spec
    assert [x.shape for x in sharded] == [(16,)]


def test_auto_shard_checks_elements_against_the_kept_spec() -> None:
    # The rewrite makes a user's rebatch(4, drop_remainder=True) a legacy one, whose batches
    # do not match the kept static spec: TF's iterator checks them. TF 2.21, MWMS at one
    # worker, from_tensor_slices(zeros(2)).batch(2).rebatch(4, drop_remainder=True):
    # InvalidArgumentError 'Incompatible shapes at component 0: expected [4] but got [2].'
    dataset = Dataset.from_tensor_slices(np.zeros(2)).batch(2).rebatch(4, drop_remainder=True)
    sharded = dd.auto_shard_dataset(dataset, 1, 0, 1)
    assert sharded.element_spec == TensorSpec((4,), np.float64)
    with pytest.raises(errors.InvalidArgumentError) as raised:
        list(sharded)
    assert str(raised.value) == "Incompatible shapes at component 0: expected [4] but got [2]."
