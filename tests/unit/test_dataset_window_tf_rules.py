"""``window``, ``group_by_window``, ``bucket_by_sequence_length``, ``choose_from_datasets`` and
``counter``, pinned to literal TF 2.21 outputs.

Every expectation was printed by ``/tmp/tfvenv/bin/python`` (tensorflow-cpu 2.21.0, eager) running
the expression in the comment above it, with ``D = tf.data.Dataset``, ``R = D.range`` and
``V(n) = R(1, n + 1).map(lambda x: tf.fill([x % 7], x % 7))`` (rows ``[1]``, ``[2, 2]``, ...,
``[6] * 6``, ``[]``, ``[1]``, ...).
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pytest

import mwms_mpi.distribute as ds
from mwms_mpi import errors
from mwms_mpi.data import Dataset, DatasetSpec, TensorSpec

D = Dataset
R = Dataset.range
I64 = TensorSpec((), np.int64)


def V(n: int) -> Dataset:
    return R(1, n + 1).map(lambda x: np.full((int(x % 7),), x % 7))


def SIZE(x: np.ndarray) -> np.ndarray:
    return np.asarray(np.size(x), np.int32)  # tf.size: an int32 scalar


def card(d: Dataset) -> int:
    return int(d.cardinality())


def lists(d: Dataset) -> list[Any]:
    return [x.tolist() for x in d]


def windows(d: Dataset) -> list[list[int]]:
    return [[int(v) for v in w] for w in d]


# --- window ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "expected", "count"),
    [
        # R(7).window(3, 2, 3): [[0, 3, 6], [2, 5], [4], [6]], cardinality 4
        ((3, 2, 3, False), [[0, 3, 6], [2, 5], [4], [6]], 4),
        # R(7).window(3, 4, 3, True): [[0, 3, 6]], cardinality 1
        ((3, 4, 3, True), [[0, 3, 6]], 1),
        # R(7).window(3, 1, 2, True): [[0, 2, 4], [1, 3, 5], [2, 4, 6]], cardinality 3
        ((3, 1, 2, True), [[0, 2, 4], [1, 3, 5], [2, 4, 6]], 3),
        # R(7).window(1, 4, 3): [[0], [4]], cardinality 2
        ((1, 4, 3, False), [[0], [4]], 2),
        # R(7).window(2): [[0, 1], [2, 3], [4, 5], [6]], cardinality 4
        ((2, None, 1, False), [[0, 1], [2, 3], [4, 5], [6]], 4),
    ],
)
def test_window_size_shift_stride_and_drop_remainder(
    args: tuple[Any, ...], expected: list[list[int]], count: int
) -> None:
    d = R(7).window(*args)
    assert windows(d) == expected and card(d) == count
    # element_spec: DatasetSpec(TensorSpec(shape=(), dtype=tf.int64, name=None), TensorShape([]))
    assert d.element_spec == DatasetSpec(I64)
    assert repr(d.element_spec) == (
        "DatasetSpec(TensorSpec(shape=(), dtype=int64, name=None), TensorShape([]))"
    )


def test_window_of_a_structure_is_a_structure_of_windows() -> None:
    # D.from_tensor_slices({'a': [1,2,3], 'b': [[1.,2.],[3.,4.],[5.,6.]]}).window(2)
    #   .flat_map(lambda d: D.zip(d).batch(2)): {'a': [1, 2], 'b': [[1, 2], [3, 4]]},
    #   {'a': [3], 'b': [[5, 6]]}; spec {'a': (None,) int32, 'b': (None, 2) float32}
    d = D.from_tensor_slices({"a": [1, 2, 3], "b": [[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]})
    w = d.window(2)
    assert w.element_spec == {
        "a": DatasetSpec(TensorSpec((), np.int32)),
        "b": DatasetSpec(TensorSpec((2,), np.float32)),
    }
    flat = w.flat_map(lambda e: D.zip(e).batch(2))
    assert [{k: v.tolist() for k, v in x.items()} for x in flat] == [
        {"a": [1, 2], "b": [[1.0, 2.0], [3.0, 4.0]]},
        {"a": [3], "b": [[5.0, 6.0]]},
    ]
    assert flat.element_spec == {
        "a": TensorSpec((None,), np.int32),
        "b": TensorSpec((None, 2), np.float32),
    }
    # R(5).window(3).flat_map(lambda w: D.from_tensors(w.cardinality())): 3, 2 (a window
    # knows its length); V(6).window(4, 3).flat_map(lambda w: w.padded_batch(4)): shapes (4, 4),
    # (3, 6)
    assert [int(x) for x in R(5).window(3).flat_map(lambda w: D.from_tensors(w.cardinality()))] == [
        3,
        2,
    ]
    assert [x.shape for x in V(6).window(4, 3).flat_map(lambda w: w.padded_batch(4))] == [
        (4, 4),
        (3, 6),
    ]


def test_flat_map_of_no_window_still_has_the_functions_spec() -> None:
    # R(0).window(4, None, 2, True).flat_map(lambda w: w.batch(4)): no element, spec (None,)
    # int64; R(2).window(3, 5, 1, True).flat_map(lambda w: w.enumerate()): spec (int64, int64)
    d = R(0).window(4, None, 2, True).flat_map(lambda w: w.batch(4))
    assert lists(d) == [] and d.element_spec == TensorSpec((None,), np.int64)
    d = R(2).window(3, 5, 1, True).flat_map(lambda w: w.enumerate())
    assert list(d) == [] and d.element_spec == (I64, I64)


def test_window_cardinality_and_argument_errors() -> None:
    # R(5).repeat().window(2): -1 (with drop_remainder too); after a filter: -2
    assert card(R(5).repeat().window(2)) == -1
    assert card(R(5).repeat().window(2, drop_remainder=True)) == -1
    assert card(R(5).filter(lambda x: x > 0).window(2)) == -2
    # R(5).window(0) / window(2, 0) / window(2, 1, 0): InvalidArgumentError "Window size must be
    # greater than zero." ("shift", "stride")
    for args, what in (((0,), "size"), ((2, -1), "shift"), ((2, 1, 0), "stride")):
        with pytest.raises(errors.InvalidArgumentError, match=f"Window {what} must be greater"):
            R(5).window(*args)
    # R(5).window(2.5): TypeError "Cannot convert 2.5 to EagerTensor of dtype int64";
    # R(5).window(2, drop_remainder=1): "Cannot convert 1 to EagerTensor of dtype bool"
    with pytest.raises(
        TypeError, match=re.escape("Cannot convert 2.5 to EagerTensor of dtype int64")
    ):
        R(5).window(2.5)
    with pytest.raises(TypeError, match="Cannot convert 1 to EagerTensor of dtype bool"):
        R(5).window(2, drop_remainder=1)
    # list(R(5).window(2).as_numpy_iterator()): TypeError "`tf.data.Dataset.as_numpy_iterator()`
    # is not supported for datasets that produce values of type <class '...DatasetV2'>"
    with pytest.raises(TypeError, match="as_numpy_iterator\\(\\)` is not supported"):
        list(R(5).window(2).as_numpy_iterator())


# --- group_by_window and bucket_by_sequence_length -------------------------------------------


def test_group_by_window_groups_by_key_and_flushes_the_rest_in_key_order() -> None:
    # R(10).group_by_window(lambda x: x % 3, lambda k, w: w.batch(2), 2):
    # [0, 3], [1, 4], [2, 5], [6, 9], [7], [8]; spec (None,) int64; cardinality -2
    d = R(10).group_by_window(lambda x: x % 3, lambda k, w: w.batch(2), 2)
    assert lists(d) == [[0, 3], [1, 4], [2, 5], [6, 9], [7], [8]]
    assert d.element_spec == TensorSpec((None,), np.int64) and card(d) == -2
    # R(10).group_by_window(lambda x: 5 - x, lambda k, w: w.batch(5), 5): 9, 8, ..., 0 (the
    # groups left at the end, keys -4 ... 5 in increasing order)
    d = R(10).group_by_window(lambda x: 5 - x, lambda k, w: w.batch(5), 5)
    assert lists(d) == [[v] for v in range(9, -1, -1)]
    # window_size_func=lambda k: k + 1 on x % 3: [0], [3], [1, 4], [6], [2, 5, 8], [9], [7]
    d = R(10).group_by_window(
        lambda x: x % 3, lambda k, w: w.batch(10), window_size_func=lambda k: k + 1
    )
    assert lists(d) == [[0], [3], [1, 4], [6], [2, 5, 8], [9], [7]]
    # lambda key, w: w.map(lambda v: v * 10 + key): 0, 30, 11, 41, 22, 52, 60, 90, 71, 82
    d = R(10).group_by_window(lambda x: x % 3, lambda k, w: w.map(lambda v: v * 10 + k), 2)
    assert [int(x) for x in d] == [0, 30, 11, 41, 22, 52, 60, 90, 71, 82]
    # R(10).repeat()...: cardinality -1
    assert card(R(10).repeat().group_by_window(lambda x: x % 2, lambda k, w: w.batch(2), 2)) == -1


def test_group_by_window_errors() -> None:
    gbw = R(10).group_by_window
    # neither / both: ValueError "Either the `window_size` argument or the `window_size_func`
    # argument must be specified."
    with pytest.raises(ValueError, match="Either the `window_size` argument"):
        gbw(lambda x: x % 2, lambda k, w: w)
    with pytest.raises(ValueError, match="Either the `window_size` argument"):
        gbw(lambda x: x % 2, lambda k, w: w, 2, lambda k: k)
    # window size 0: InvalidArgumentError when iterated "Window size must be greater than zero,
    # but got 0."
    with pytest.raises(
        errors.InvalidArgumentError, match=re.escape("greater than zero, but got 0.")
    ):
        list(gbw(lambda x: x % 2, lambda k, w: w.batch(2), 0))
    # key (x, x): ValueError "Invalid `key_func`. `key_func` must return a single `tf.int64`
    # scalar tensor but its return type is TensorSpec(shape=(2,), dtype=tf.int64, name=None)."
    with pytest.raises(
        ValueError, match=r"return type is TensorSpec\(shape=\(2,\), dtype=tf.int64"
    ):
        gbw(lambda x: (x, x), lambda k, w: w.batch(2), 2)
    # key x > 3: ValueError "Tensor conversion requested dtype int64 for Tensor with dtype bool"
    with pytest.raises(ValueError, match="requested dtype int64 for Tensor with dtype bool"):
        gbw(lambda x: x > 3, lambda k, w: w.batch(2), 2)
    # window size 2.5: TypeError "Expected int64, but got 2.5 of type 'float'."
    with pytest.raises(TypeError, match=re.escape("Expected int64, but got 2.5 of type 'float'.")):
        gbw(lambda x: x % 2, lambda k, w: w.batch(2), 2.5)
    # reduce_func returning (w, w): TypeError "Invalid `reduce_func`. `reduce_func` must return
    # a single `tf.data.Dataset` object but its return type is (DatasetSpec(TensorSpec(
    # shape=(), dtype=tf.int64, name=None), TensorShape([])), DatasetSpec(...))."
    spec = "DatasetSpec(TensorSpec(shape=(), dtype=tf.int64, name=None), TensorShape([]))"
    with pytest.raises(TypeError) as info:
        gbw(lambda x: x % 2, lambda k, w: (w, w), 2)
    assert str(info.value) == (
        "Invalid `reduce_func`. `reduce_func` must return a single `tf.data.Dataset` object but "
        f"its return type is ({spec}, {spec})."
    )


def test_bucket_by_sequence_length_pads_each_bucket() -> None:
    # V(9).bucket_by_sequence_length(tf.size, [3], [2, 2], padding_values=np.int64(-1)):
    # shapes (2, 2), (2, 4), (2, 6), (2, 1) [[7], [-1]]... first batch [[1, -1], [2, 2]];
    # spec (None, None) int64
    d = V(9).bucket_by_sequence_length(SIZE, [3], [2, 2], padding_values=np.int64(-1))
    out = [x.tolist() for x in d]
    assert out[0] == [[1, -1], [2, 2]] and out[1] == [[3, 3, 3, -1], [4, 4, 4, 4]]
    assert d.element_spec == TensorSpec((None, None), np.int64) and card(d) == -2
    # padded_shapes=[8]: spec (None, 8)
    d = V(9).bucket_by_sequence_length(SIZE, [3], [2, 2], padded_shapes=[8])
    assert d.element_spec == TensorSpec((None, 8), np.int64)
    assert {x.shape[1] for x in d} == {8}
    # pad_to_bucket_boundary=True, boundaries [3, 9]: first batches (2, 2), (2, 8); a length in
    # the last bucket: InternalError "... elements must have length < max(bucket_boundaries)."
    d = V(9).bucket_by_sequence_length(SIZE, [3, 9], [2, 2, 2], pad_to_bucket_boundary=True)
    assert [x.shape for x in d][:2] == [(2, 2), (2, 8)]
    d = V(5).bucket_by_sequence_length(SIZE, [2], [2, 3], pad_to_bucket_boundary=True)
    with pytest.raises(errors.InternalError, match="must have length < max"):
        list(d)
    # a length of int64: TypeError "Input 'y' of 'LessEqual' Op has type int64 that does not
    # match type int32 of argument 'x'."; sizes of another length: ValueError
    with pytest.raises(TypeError, match="'LessEqual' Op has type int64"):
        V(9).bucket_by_sequence_length(lambda x: np.int64(np.size(x)), [3], [2, 2])
    with pytest.raises(ValueError, match="`len\\(bucket_batch_sizes\\)=1`"):
        V(9).bucket_by_sequence_length(SIZE, [3], [2])


# --- choose_from_datasets and counter ----------------------------------------------------------


def test_choose_from_datasets_order_stop_and_spec() -> None:
    choice = D.from_tensor_slices(np.array([0, 1, 1, 0, 0, 1], np.int64))
    # [R(3), R(10, 13)] by [0, 1, 1, 0, 0, 1]: 0, 10, 11, 1, 2, 12; cardinality -2
    d = D.choose_from_datasets([R(3), R(10, 13)], choice)
    assert [int(x) for x in d] == [0, 10, 11, 1, 2, 12] and card(d) == -2
    # by [0, 0, 0, 0, 1]: 0, 1, 2; stop_on_empty_dataset=False: 0, 1, 2, 10
    choice = D.from_tensor_slices(np.array([0, 0, 0, 0, 1], np.int64))
    assert [int(x) for x in D.choose_from_datasets([R(3), R(10, 13)], choice)] == [0, 1, 2]
    d = D.choose_from_datasets([R(3), R(10, 13)], choice, stop_on_empty_dataset=False)
    assert [int(x) for x in d] == [0, 1, 2, 10]
    # R(2).repeat() with stop_on_empty_dataset=False ends when both are exhausted
    d = D.choose_from_datasets([R(3), R(10, 13)], R(2).repeat(), stop_on_empty_dataset=False)
    assert [int(x) for x in d] == [0, 10, 1, 11, 2, 12]
    # cardinality -1 as soon as one input is infinite, even with an empty choice dataset
    assert card(D.choose_from_datasets([R(3).repeat(), R(3)], R(0))) == -1
    # batch(2, drop_remainder=True) and batch(3, drop_remainder=True): spec (None,)
    d = D.choose_from_datasets(
        [R(3).batch(2, drop_remainder=True), R(4).batch(3, drop_remainder=True)], R(2)
    )
    assert d.element_spec == TensorSpec((None,), np.int64)


def test_choose_from_datasets_errors() -> None:
    # a choice of 2 among two: InvalidArgumentError "Selector index out of range: 2 >= 2"
    choice = D.from_tensor_slices(np.array([0, 2, 1], np.int64))
    with pytest.raises(errors.InvalidArgumentError, match="Selector index out of range: 2 >= 2"):
        list(D.choose_from_datasets([R(3), R(10, 13)], choice))
    with pytest.raises(ValueError, match=re.escape("`datasets` should not be empty.")):
        D.choose_from_datasets([], R(3))
    # int32 choices: TypeError "Invalid `choice_dataset`. Elements of `choice_dataset` must be
    # scalar `tf.int64` tensors but are TensorSpec(shape=(), dtype=tf.int32, name=None)."
    with pytest.raises(TypeError, match=r"but are TensorSpec\(shape=\(\), dtype=tf.int32"):
        D.choose_from_datasets([R(3)], D.from_tensor_slices(np.array([0], np.int32)))
    with pytest.raises(
        TypeError, match=re.escape("should be a `tf.data.Dataset` but is <class 'list'>.")
    ):
        D.choose_from_datasets([R(3)], [0, 1])
    # [R(3), D.from_tensor_slices([[1, 2]])]: TypeError "Invalid `datasets`. `datasets` must have
    # compatible element specs.\n Dataset 0 element_spec=TensorSpec(shape=(), dtype=tf.int64,
    # name=None).\nDataset 1 element_spec=TensorSpec(shape=(2,), dtype=tf.int32, name=None)."
    with pytest.raises(TypeError) as info:
        D.choose_from_datasets([R(3), D.from_tensor_slices([[1, 2]])], R(2))
    assert str(info.value) == (
        "Invalid `datasets`. `datasets` must have compatible element specs.\n Dataset 0 "
        "element_spec=TensorSpec(shape=(), dtype=tf.int64, name=None).\nDataset 1 "
        "element_spec=TensorSpec(shape=(2,), dtype=tf.int32, name=None)."
    )


def test_counter() -> None:
    # D.counter(5, -2, tf.int32).take(3): 5, 3, 1 (int32); D.counter().cardinality(): -1
    d = D.counter(5, -2, np.int32).take(3)
    assert [(x.dtype.name, int(x)) for x in d] == [("int32", 5), ("int32", 3), ("int32", 1)]
    assert card(D.counter()) == -1 and D.counter().element_spec == I64
    # D.counter(2**63 - 2).take(3): 9223372036854775806, 9223372036854775807,
    # -9223372036854775808 (wraps); D.counter(0, 3, tf.int8).take(45)[-1]: -124
    assert [int(x) for x in D.counter(2**63 - 2).take(3)] == [2**63 - 2, 2**63 - 1, -(2**63)]
    assert int(list(D.counter(0, 3, np.int8).take(45))[-1]) == -124
    # D.counter(1.5): TypeError "Cannot convert 1.5 to EagerTensor of dtype int64"
    with pytest.raises(
        TypeError, match=re.escape("Cannot convert 1.5 to EagerTensor of dtype int64")
    ):
        D.counter(1.5)


# --- under MirroredStrategy --------------------------------------------------------------------


def test_under_mirrored_strategy_per_replica_elements_as_tf() -> None:
    # MirroredStrategy(['/cpu:0', '/cpu:1']) over two logical CPUs, experimental_distribute_dataset,
    # per step the replicas' values (spec PerReplicaSpec of the elements' spec, batch dim None)
    strategy = ds.MirroredStrategy(["/cpu:0", "/cpu:1"])

    def steps(d: Dataset) -> list[list[Any]]:
        dist = strategy.experimental_distribute_dataset(d)
        return [[v.tolist() for v in strategy.experimental_local_results(x)] for x in dist]

    # R(20).group_by_window(lambda x: x % 2, lambda k, w: w.batch(4), 4)
    d = R(20).group_by_window(lambda x: x % 2, lambda k, w: w.batch(4), 4)
    assert steps(d) == [
        [[0, 2], [4, 6]],
        [[1, 3], [5, 7]],
        [[8, 10], [12, 14]],
        [[9, 11], [13, 15]],
        [[16], [18]],
        [[17], [19]],
    ]
    # V(12).bucket_by_sequence_length(tf.size, [3], [4, 4])
    assert steps(V(12).bucket_by_sequence_length(SIZE, [3], [4, 4])) == [
        [[[3, 3, 3, 0, 0, 0], [4, 4, 4, 4, 0, 0]], [[5, 5, 5, 5, 5, 0], [6, 6, 6, 6, 6, 6]]],
        [[[1, 0], [2, 2]], [[0, 0], [1, 0]]],
        [[[2, 2]], []],
        [[[3, 3, 3, 0, 0], [4, 4, 4, 4, 0]], [[5, 5, 5, 5, 5]]],
    ]
    # D.choose_from_datasets([R(8).batch(4), R(10, 18).batch(4)], R(2).repeat(2))
    d = D.choose_from_datasets([R(8).batch(4), R(10, 18).batch(4)], R(2).repeat(2))
    assert steps(d) == [
        [[0, 1], [2, 3]],
        [[10, 11], [12, 13]],
        [[4, 5], [6, 7]],
        [[14, 15], [16, 17]],
    ]
    # R(12).window(4, 2, drop_remainder=True).flat_map(lambda w: w.batch(4)): [[0, 1], [2, 3]],
    # [[2, 3], [4, 5]], ... [[8, 9], [10, 11]]
    d = R(12).window(4, 2, drop_remainder=True).flat_map(lambda w: w.batch(4))
    assert steps(d) == [[[s, s + 1], [s + 2, s + 3]] for s in range(0, 9, 2)]


# --- random and sample_from_datasets: TF's Philox streams -------------------------------------


def ints(d: Dataset) -> list[int]:
    return [int(x) for x in d]


def test_random_is_tfs_philox_stream() -> None:
    # D.random(seed=42).take(10); spec TensorSpec((), int64); cardinality -1
    d = D.random(seed=42)
    assert ints(d.take(10)) == [
        2985944072, 4132877644, 929418493, 249609589, 146598941,
        4149265688, 1024970628, 881762723, 917178705, 962369086,
    ]  # fmt: skip
    assert d.element_spec == I64 and card(d) == -1
    # D.random(seed=-1).take(3) (seed -1 % (2**31 - 1)); D.random(seed=2**31 + 5) is seed 6
    assert ints(D.random(seed=-1).take(3)) == [3552347811, 3880939537, 3875638250]
    assert ints(D.random(seed=2**31 + 5).take(2)) == ints(D.random(seed=6).take(2))
    # rerandomize_each_iteration=True: .take(3).repeat(3), each iteration TF's next seeds
    d = D.random(seed=42, rerandomize_each_iteration=True).take(3).repeat(3)
    assert ints(d) == [
        1632911145, 3351202991, 521718116, 978081363, 95978499,
        2394667100, 3197014272, 3433279255, 1103721991,
    ]  # fmt: skip
    # D.random(seed=1.5): TypeError "Cannot convert 1.5 to EagerTensor of dtype int64"
    with pytest.raises(TypeError, match=re.escape("Cannot convert 1.5 to EagerTensor of dtype")):
        D.random(seed=1.5)


def test_sample_from_datasets_draws_tfs_choices() -> None:
    # D.sample_from_datasets([R(3), R(10, 13)], seed=3, rerandomize_each_iteration=True)
    #   .repeat(3)
    d = D.sample_from_datasets([R(3), R(10, 13)], seed=3, rerandomize_each_iteration=True)
    assert ints(d.repeat(3)) == [0, 1, 2, 10, 11, 12, 10, 11, 0, 1, 12, 2, 0, 10, 11, 1, 12, 2]
    # [R(0, 1), R(100, 112), R(200, 201), R(300, 307)], [0.14, 2.58, 0.87, 0.43], seed=520528
    d = D.sample_from_datasets(
        [R(0, 1), R(100, 112), R(200, 201), R(300, 307)], [0.14, 2.58, 0.87, 0.43], seed=520528
    )
    assert ints(d) == [
        300, 100, 301, 101, 102, 103, 104, 105, 106, 107, 108,
        109, 110, 111, 302, 200, 303, 304, 305, 306, 0,
    ]  # fmt: skip
    # [R(0, 4), R(100, 112), R(200, 201)], seed=993473, stop_on_empty_dataset=True
    d = D.sample_from_datasets(
        [R(0, 4), R(100, 112), R(200, 201)], seed=993473, stop_on_empty_dataset=True
    )
    assert ints(d) == [200, 0, 1, 2, 100, 101, 3]
    # weights a dataset of float32 rows [[0.9, 0.1], [0.1, 0.9]] * 20, seed=5
    rows = D.from_tensor_slices(np.array([[0.9, 0.1], [0.1, 0.9]] * 20, np.float32))
    d = D.sample_from_datasets([R(20), R(100, 120)], rows, seed=5)
    assert ints(d)[:12] == [0, 100, 1, 101, 2, 102, 3, 103, 4, 5, 6, 104]
    # [0.0, 1.0]: the zero-weight dataset is dropped, the other returned itself: 10, 11, 12;
    # [0.0, 0.0]: nothing
    only = R(10, 13)
    assert D.sample_from_datasets([R(3), only], [0.0, 1.0], seed=1) is only
    assert ints(D.sample_from_datasets([R(3), only], [0.0, 0.0], seed=1)) == []
    # cardinality -1 when an input is infinite, else -2
    assert card(D.sample_from_datasets([R(3).repeat(), R(10, 13)], seed=1)) == -1
    assert card(D.sample_from_datasets([R(3), R(10, 13)], seed=1)) == -2


def test_sample_from_datasets_errors() -> None:
    with pytest.raises(ValueError, match=re.escape("`datasets` should not be empty.")):
        D.sample_from_datasets([])
    # [0.5] for two: ValueError "Invalid `weights`. `weights` should have the same length as
    # `datasets` but got `len(weights)=1` vs. `len(datasets)=2`."
    with pytest.raises(ValueError, match=re.escape("`len(weights)=1` vs. `len(datasets)=2`.")):
        D.sample_from_datasets([R(3), R(10, 13)], [0.5])
    # [1, 2]: TypeError "Invalid `weights`. `weights` type must be either `tf.float32` or
    # `tf.float64` but is <dtype: 'int32'>."
    with pytest.raises(TypeError, match=re.escape("but is <dtype: 'int32'>.")):
        D.sample_from_datasets([R(3), R(10, 13)], [1, 2])


def test_sample_from_datasets_under_mirrored_strategy_as_tf() -> None:
    # MirroredStrategy(['/cpu:0', '/cpu:1']): D.sample_from_datasets([R(8), R(10, 18)],
    # [0.3, 0.7], seed=11).batch(4), per step the replicas' values
    strategy = ds.MirroredStrategy(["/cpu:0", "/cpu:1"])
    d = D.sample_from_datasets([R(8), R(10, 18)], [0.3, 0.7], seed=11).batch(4)
    dist = strategy.experimental_distribute_dataset(d)
    steps = [[v.tolist() for v in strategy.experimental_local_results(x)] for x in dist]
    assert steps == [[[10, 0], [11, 12]], [[1, 2], [13, 14]], [[15, 16], [3, 17]], [[4, 5], [6, 7]]]


def test_windows_as_elements_of_other_transformations() -> None:
    # R(6).window(2).concatenate(R(3).window(1)).flat_map(lambda w: w.batch(2)):
    # [0, 1], [2, 3], [4, 5], [0], [1], [2]
    d = R(6).window(2).concatenate(R(3).window(1)).flat_map(lambda w: w.batch(2))
    assert lists(d) == [[0, 1], [2, 3], [4, 5], [0], [1], [2]]
    # R(7).window(3).cache().flat_map(lambda w: w).repeat(2): 0 ... 6 twice
    assert ints(R(7).window(3).cache().flat_map(lambda w: w).repeat(2)) == [*range(7)] * 2
    # R(12).window(4).group_by_window(lambda w: 0 (int64), lambda k, ws: ws.flat_map(
    #   lambda w: w.batch(4)), 2): [0..3], [4..7], [8..11]
    d = (
        R(12)
        .window(4)
        .group_by_window(lambda w: np.int64(0), lambda k, ws: ws.flat_map(lambda w: w.batch(4)), 2)
    )
    assert lists(d) == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11]]
    # D.choose_from_datasets([R(4).window(2), R(6).window(3)], R(2).repeat(2)): windows
    # [0, 1], [0, 1, 2], [2, 3], [3, 4, 5]; spec DatasetSpec(TensorSpec((), int64), [])
    d = D.choose_from_datasets([R(4).window(2), R(6).window(3)], R(2).repeat(2))
    assert windows(d) == [[0, 1], [0, 1, 2], [2, 3], [3, 4, 5]]
    assert d.element_spec == DatasetSpec(I64)


def test_rejection_resample_is_tfs_composition() -> None:
    def cls(x: np.ndarray) -> np.ndarray:
        return np.asarray(x % 3 > 0, np.int32)

    # R(40).rejection_resample(lambda x: tf.cast(x % 3 > 0, tf.int32), [0.5, 0.5], [0.3, 0.7],
    #   seed=3): (class, x) pairs, the first 14; spec (int32 scalar, int64 scalar); card -2
    d = R(40).rejection_resample(cls, [0.5, 0.5], [0.3, 0.7], seed=3)
    pairs = [(int(c), int(x)) for c, x in d]
    assert pairs[:14] == [
        (0, 0), (1, 1), (1, 2), (0, 3), (1, 4), (1, 5), (0, 6),
        (0, 0), (1, 7), (1, 8), (0, 3), (0, 9), (1, 10), (1, 11),
    ]  # fmt: skip
    assert d.element_spec == (TensorSpec((), np.int32), I64) and card(d) == -2
    # the same without initial_dist (estimated per batch of 32), .repeat(2): first 14
    d = R(40).rejection_resample(cls, [0.5, 0.5], seed=3).repeat(2)
    assert [(int(c), int(x)) for c, x in d][:14] == [
        (0, 0), (1, 1), (1, 2), (0, 3), (1, 4), (1, 5), (0, 6),
        (1, 7), (1, 8), (0, 9), (0, 0), (1, 10), (1, 11), (0, 12),
    ]  # fmt: skip
    # [0.9, 0.1] from [0.33, 0.67]: mostly class 0, repeated
    d = R(40).rejection_resample(cls, [0.9, 0.1], [0.33, 0.67], seed=3)
    assert [int(x) for _, x in d][:12] == [0, 3, 6, 9, 12, 15, 18, 21, 24, 0, 27, 1]


def test_map_and_filter_of_windows() -> None:
    # R(6).window(2).map(lambda w: w): spec DatasetSpec(TensorSpec((), int64), []); card 3;
    # .map(lambda w: w.batch(2)): DatasetSpec(TensorSpec((None,), int64), [])
    d = R(6).window(2).map(lambda w: w)
    assert windows(d) == [[0, 1], [2, 3], [4, 5]] and card(d) == 3
    assert d.element_spec == DatasetSpec(I64)
    d = R(6).window(2).map(lambda w: w.batch(2))
    assert d.element_spec == DatasetSpec(TensorSpec((None,), np.int64))
    assert lists(d.flat_map(lambda w: w)) == [[0, 1], [2, 3], [4, 5]]
    # R(6).window(2).map(lambda w: (w, w.skip(1))).flat_map(lambda a, b: D.zip((a, b))):
    # (0, 1), (2, 3), (4, 5)
    d = R(6).window(2).map(lambda w: (w, w.skip(1))).flat_map(lambda a, b: D.zip((a, b)))
    assert [(int(a), int(b)) for a, b in d] == [(0, 1), (2, 3), (4, 5)]
    # R(7).window(3).map(lambda w: w.reduce(0 (int64), lambda s, x: s + x)): 3, 12, 6
    d = R(7).window(3).map(lambda w: w.reduce(np.int64(0), lambda s, x: s + x))
    assert ints(d) == [3, 12, 6] and d.element_spec == I64
    # R(7).window(2).filter(lambda w: w.cardinality() > 1).flat_map(lambda w: w): 0 ... 5
    d = R(7).window(2).filter(lambda w: w.cardinality() > 1).flat_map(lambda w: w)
    assert ints(d) == [0, 1, 2, 3, 4, 5]
