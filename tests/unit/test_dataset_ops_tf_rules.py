"""``enumerate``, ``padded_batch``, ``flat_map``, ``interleave``, ``reduce``, ``take_while``,
``apply``, ``get_single_element``, ``unique`` and ``scan``, pinned to literal TF 2.21 outputs.

Every expectation was printed by ``/tmp/tfvenv/bin/python`` (tensorflow-cpu 2.21.0, eager) running
the expression in the comment above it, with ``D = tf.data.Dataset``, ``R = D.range`` and
``V = R(1, 6).map(lambda x: tf.fill([x], x))`` (rows ``[1]``, ``[2, 2]``, ... ``[5, 5, 5, 5, 5]``).
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import pytest

import mwms_mpi.distribute as ds
from mwms_mpi import errors
from mwms_mpi.data import Dataset, TensorSpec
from mwms_mpi.data import distribute as dd

D = Dataset
R = Dataset.range
I64 = TensorSpec((), np.int64)


def V() -> Dataset:
    return R(1, 6).map(lambda x: np.full((int(x),), x))


def card(ds: Dataset) -> int:
    return int(ds.cardinality())


def items(ds: Dataset) -> list[Any]:
    """Elements as nested lists, each leaf ``(dtype name, value list)``."""

    def one(x: Any) -> Any:
        if isinstance(x, tuple):
            return tuple(one(v) for v in x)
        if isinstance(x, dict):
            return {k: one(v) for k, v in x.items()}
        assert isinstance(x, np.ndarray)
        return (x.dtype.name, x.tolist())

    return [one(x) for x in ds]


# --- enumerate ---------------------------------------------------------------------------------


def test_enumerate_pairs_an_int64_counter_from_start() -> None:
    # R(5).enumerate(3): (3, 0) ... (7, 4); spec (TensorSpec((), int64),) * 2; cardinality 5
    ds = R(5).enumerate(3)
    assert items(ds) == [(("int64", 3 + i), ("int64", i)) for i in range(5)]
    assert ds.element_spec == (I64, I64) and card(ds) == 5
    # D.from_tensor_slices(([1, 2], [3., 4.])).enumerate(): (0, (1, 3.0)), (1, (2, 4.0))
    ds = D.from_tensor_slices(([1, 2], [3.0, 4.0])).enumerate()
    assert items(ds) == [
        (("int64", 0), (("int32", 1), ("float32", 3.0))),
        (("int64", 1), (("int32", 2), ("float32", 4.0))),
    ]
    assert ds.element_spec == (I64, (TensorSpec((), np.int32), TensorSpec((), np.float32)))
    # R(3).enumerate(np.uint8(3)) -> counters 3, 4, 5; R(3).enumerate(True) -> 1, 2, 3
    assert [int(i) for i, _ in R(3).enumerate(np.uint8(3))] == [3, 4, 5]
    assert [int(i) for i, _ in R(3).enumerate(True)] == [1, 2, 3]


def test_enumerate_counter_ends_at_the_int64_maximum_cardinality_stays_the_inputs() -> None:
    # R(3).enumerate(2**63-2): one element (9223372036854775806, 0), cardinality 3
    ds = R(3).enumerate(2**63 - 2)
    assert items(ds) == [(("int64", 2**63 - 2), ("int64", 0))] and card(ds) == 3
    # R(3).enumerate(2**63-1): no element, cardinality 3
    assert items(R(3).enumerate(2**63 - 1)) == [] and card(R(3).enumerate(2**63 - 1)) == 3
    # R(3).repeat().enumerate().cardinality() -> -1; D.range(0, 2**63-1).cardinality() -> -1;
    # D.range(0, 2**63-2).cardinality() -> 9223372036854775806
    assert card(R(3).repeat().enumerate()) == -1
    assert card(R(0, 2**63 - 1)) == -1 and card(R(5, 2**63 - 1, 3)) == -1
    assert card(R(0, 2**63 - 2)) == 2**63 - 2


def test_enumerate_argument_errors() -> None:
    # R(3).enumerate(2.5): TypeError 'Cannot convert 2.5 to EagerTensor of dtype int64'
    with pytest.raises(TypeError, match=r"Cannot convert 2\.5 to EagerTensor of dtype int64"):
        R(3).enumerate(2.5)
    # R(3).enumerate(None): ValueError 'Attempt to convert a value (None) ...'
    with pytest.raises(ValueError, match=r"Attempt to convert a value \(None\)"):
        R(3).enumerate(None)
    # R(3).enumerate(2**63), D.range(2**63): ValueError "Can't convert Python sequence with
    # out-of-range integer to Tensor."
    for make in (lambda: R(3).enumerate(2**63), lambda: R(2**63), lambda: R(1, 2**63)):
        with pytest.raises(ValueError, match="out-of-range integer to Tensor"):
            make()
    # R(3).enumerate(np.array([1])): InvalidArgumentError 'start must be a scalar'
    with pytest.raises(errors.InvalidArgumentError, match="start must be a scalar"):
        R(3).enumerate(np.array([1]))


# --- padded_batch ------------------------------------------------------------------------------


def test_padded_batch_pads_unknown_dims_to_the_longest_in_each_batch() -> None:
    # V.padded_batch(2): [[1, 0], [2, 2]], [[3, 3, 3, 0], [4, 4, 4, 4]], [[5, 5, 5, 5, 5]];
    # spec TensorSpec((None, None), int64); cardinality 3
    ds_ = V().padded_batch(2)
    assert items(ds_) == [
        ("int64", [[1, 0], [2, 2]]),
        ("int64", [[3, 3, 3, 0], [4, 4, 4, 4]]),
        ("int64", [[5, 5, 5, 5, 5]]),
    ]
    assert ds_.element_spec == TensorSpec((None, None), np.int64) and card(ds_) == 3
    # V.padded_batch(2, drop_remainder=True): spec (2, None), cardinality 2, the first two
    ds_ = V().padded_batch(2, drop_remainder=True)
    assert ds_.element_spec == TensorSpec((2, None), np.int64) and card(ds_) == 2
    assert len(items(ds_)) == 2
    # R(1, 5).map(lambda x: tf.fill([x, 5 - x], x)).padded_batch(2)
    grid = R(1, 5).map(lambda x: np.full((int(x), int(5 - x)), x)).padded_batch(2)
    assert grid.element_spec == TensorSpec((None, None, None), np.int64)
    assert items(grid) == [
        ("int64", [[[1, 1, 1, 1], [0, 0, 0, 0]], [[2, 2, 2, 0], [2, 2, 2, 0]]]),
        ("int64", [[[3, 3], [3, 3], [3, 3], [0, 0]], [[4, 0], [4, 0], [4, 0], [4, 0]]]),
    ]
    # D.from_tensor_slices(np.zeros((4, 3), np.float32)).padded_batch(3): spec (None, 3)
    assert D.from_tensor_slices(np.zeros((4, 3), np.float32)).padded_batch(
        3
    ).element_spec == TensorSpec((None, 3), np.float32)


@pytest.mark.parametrize(
    ("padded_shapes", "dim"),
    [
        ([6], 6),
        ((7,), 7),
        (5, 5),
        (np.array([6]), 6),
        (np.array([6], np.int32), 6),
        ([None], None),
        ([-1], None),
    ],
)
def test_padded_batch_padded_shapes_as_tf_takes_them(padded_shapes: Any, dim: Any) -> None:
    # V.padded_batch(2, padded_shapes=[6]): [[1, 0, 0, 0, 0, 0], [2, 2, 0, 0, 0, 0]], ...;
    # spec (None, 6); (7,) -> (None, 7); 5 -> (None, 5) (an int is one dim); [None], [-1] ->
    # (None, None), padded to the longest
    ds_ = V().padded_batch(2, padded_shapes=padded_shapes)
    assert ds_.element_spec == TensorSpec((None, dim), np.int64)
    first = next(iter(ds_))
    assert first.tolist() == [[1] + [0] * ((dim or 2) - 1), [2, 2] + [0] * ((dim or 2) - 2)]
    # 2-D: padded_shapes=[5, None] and batch 3 -> spec (None, 5, None), last batch [[[4], [4],
    # [4], [4], [0]]]
    grid = R(1, 5).map(lambda x: np.full((int(x), int(5 - x)), x))
    last = items(grid.padded_batch(3, padded_shapes=[5, None]))[-1]
    assert last == ("int64", [[[4], [4], [4], [4], [0]]])


def test_padded_batch_padding_values_per_component_default_and_broadcast() -> None:
    # V.padded_batch(2, padding_values=np.int64(-1)): [[1, -1], [2, 2]], ...
    assert items(V().padded_batch(2, padding_values=np.int64(-1)))[0] == (
        "int64",
        [[1, -1], [2, 2]],
    )
    pairs = V().map(lambda x: (x, x.astype(np.float32)))
    # .padded_batch(2, padding_values=(None, np.float32(0.5))): ([[1, 0], [2, 2]],
    # [[1.0, 0.5], [2.0, 2.0]]) first
    assert items(pairs.padded_batch(2, padding_values=(None, np.float32(0.5))))[0] == (
        ("int64", [[1, 0], [2, 2]]),
        ("float32", [[1.0, 0.5], [2.0, 2.0]]),
    )
    # .padded_batch(2, padding_values=np.int64(1)): one value for every component -> TypeError
    # "... values type <dtype: 'int64'> does not match type <dtype: 'float32'> ..."
    with pytest.raises(TypeError, match="<dtype: 'int64'> does not match type <dtype: 'float32'>"):
        pairs.padded_batch(2, padding_values=np.int64(1))
    # dict element, padded_shapes={'a': [8], 'b': [2]}, padding_values={'a': 9, 'b': 8} (int64)
    dicts = (
        V()
        .map(lambda x: {"a": x, "b": x[:1]})
        .padded_batch(
            2,
            padded_shapes={"a": [8], "b": [2]},
            padding_values={"a": np.int64(9), "b": np.int64(8)},
        )
    )
    assert dicts.element_spec == {
        "a": TensorSpec((None, 8), np.int64),
        "b": TensorSpec((None, 2), np.int64),
    }
    assert items(dicts)[2] == {"a": ("int64", [[5, 5, 5, 5, 5, 9, 9, 9]]), "b": ("int64", [[5, 8]])}
    # bool pads with False; float16 with np.float16(7)
    flags = D.from_tensor_slices(np.ones((4, 3), np.bool_)).padded_batch(3, padded_shapes=[5])
    assert items(flags)[1] == ("bool", [[True, True, True, False, False]])
    halves = D.from_tensor_slices(np.ones((4, 3), np.float16)).padded_batch(
        3, padded_shapes=[5], padding_values=np.float16(7)
    )
    assert items(halves)[1] == ("float16", [[1.0, 1.0, 1.0, 7.0, 7.0]])


def test_padded_batch_argument_errors() -> None:
    # padded_shapes=[]: ValueError 'The padded shape () is not compatible with the shape (None,)
    # of the corresponding input component.'
    with pytest.raises(ValueError, match=r"The padded shape \(\) is not compatible with the shape"):
        V().padded_batch(2, padded_shapes=[])
    # D.from_tensor_slices(np.zeros((4, 3))).padded_batch(3, padded_shapes=[2]): ValueError
    # 'The padded shape (2,) is not compatible with the shape (3,) ...'
    with pytest.raises(ValueError, match=r"shape \(2,\) is not compatible with the shape \(3,\)"):
        D.from_tensor_slices(np.zeros((4, 3))).padded_batch(3, padded_shapes=[2])
    # [6.0]: TypeError 'Padded shape [6.0] must be a `tf.int64` vector tensor, but its element
    # type was float32.'; np.array([[6]]): ValueError '... but its shape was (1, 1).'
    with pytest.raises(TypeError, match=r"Padded shape \[6.0\] .* element type was float32\."):
        V().padded_batch(2, padded_shapes=[6.0])
    # [-2]: ValueError 'Dimension -2 must be >= 0'
    with pytest.raises(ValueError, match="Dimension -2 must be >= 0"):
        V().padded_batch(2, padded_shapes=[-2])
    with pytest.raises(ValueError, match=r"Padded shape \[\[6\]\] .* its shape was \(1, 1\)\."):
        V().padded_batch(2, padded_shapes=np.array([[6]]))
    # ([6],) for a one-component element: ValueError '... but its shape was (1, 1).'
    with pytest.raises(ValueError, match=r"its shape was \(1, 1\)"):
        V().padded_batch(2, padded_shapes=([6],))
    pairs = V().map(lambda x: (x, x.astype(np.float32)))
    # a list for a tuple element: TypeError 'If shallow structure is a sequence, input must also
    # be a sequence. Input has type: 'list'.'; ([6],): ValueError "The two structures don't have
    # the same sequence length. Input structure has length 1, while shallow structure has
    # length 2."
    with pytest.raises(TypeError, match="Input has type: 'list'"):
        pairs.padded_batch(2, padded_shapes=[6])
    with pytest.raises(ValueError, match="Input structure has length 1, while shallow"):
        pairs.padded_batch(2, padded_shapes=([6],))
    # a tuple of padding values for a one-component element: TypeError 'If shallow structure is
    # a sequence, input must also be a sequence. Input has type: 'ndarray'.'; a dict missing a
    # key: ValueError "The two structures don't have the same sequence length. Input structure
    # has length 2, while shallow structure has length 1." (TF merges them into the defaults)
    with pytest.raises(TypeError, match="Input has type: 'ndarray'"):
        V().padded_batch(2, padding_values=(np.int64(3),))
    dicts = V().map(lambda x: {"b": x, "a": x[0]})
    with pytest.raises(ValueError, match="Input structure has length 2, while shallow structure"):
        dicts.padded_batch(2, padding_values={"b": np.int64(-5)})
    with pytest.raises(ValueError, match="Input structure has length 1, while shallow structure"):
        dicts.padded_batch(2, padded_shapes={"a": []})
    # padding_values=-1 (a Python int is int32): TypeError "Invalid `padding_values`.
    # `padding_values` values type <dtype: 'int32'> does not match type <dtype: 'int64'> of the
    # corresponding input component."; np.array([1, 2]): ValueError '... should be scalars,
    # but got (2,).'
    with pytest.raises(TypeError, match="<dtype: 'int32'> does not match type <dtype: 'int64'>"):
        V().padded_batch(2, padding_values=-1)
    with pytest.raises(ValueError, match=r"should be scalars, but got \(2,\)\."):
        V().padded_batch(2, padding_values=np.array([1, 2]))
    # padded_batch(0): InvalidArgumentError 'Batch size must be greater than zero.';
    # drop_remainder=1: TypeError 'Cannot convert 1 to EagerTensor of dtype bool'
    with pytest.raises(errors.InvalidArgumentError, match="Batch size must be greater than zero"):
        V().padded_batch(0)
    with pytest.raises(TypeError, match="Cannot convert 1 to EagerTensor of dtype bool"):
        V().padded_batch(2, drop_remainder=1)


def test_padded_batch_too_small_fails_at_the_batch_with_data_loss() -> None:
    # V.padded_batch(2, padded_shapes=[4]): two batches, then DataLossError 'Attempted to pad to
    # a smaller size than the input element.'
    it = iter(V().padded_batch(2, padded_shapes=[4]))
    assert next(it).tolist() == [[1, 0, 0, 0], [2, 2, 0, 0]]
    assert next(it).tolist() == [[3, 3, 3, 0], [4, 4, 4, 4]]
    with pytest.raises(errors.DataLossError, match="Attempted to pad to a smaller size"):
        next(it)


def _rows(n: int) -> Dataset:
    """Rows ``[x] * (x % 7)`` for x in 1..n: lengths 1..6, then 0 (``tf.fill([x % 7], x)``)."""
    return R(1, n + 1).map(lambda x: np.full((int(x % 7),), x))


def test_padded_batch_under_mirrored_strategy_splits_each_padded_batch() -> None:
    # tf.data.experimental's compute_batch_size: V9.padded_batch(5) -> 5 (it sees through
    # padded_batch); after a map -> -1; with drop_remainder -> 5
    assert dd.compute_batch_size(_rows(9).padded_batch(5)) == 5
    assert dd.compute_batch_size(_rows(9).padded_batch(5).map(lambda x: x)) == -1
    assert dd.compute_batch_size(_rows(9).padded_batch(5, drop_remainder=True)) == 5
    # MirroredStrategy(['/cpu:0', '/cpu:1']) over two logical CPUs, experimental_distribute_dataset
    # of V9.padded_batch(5, padding_values=np.int64(-1)), per step the replicas' values:
    # [[[1, -1, -1, -1, -1], [2, 2, -1, -1, -1], [3, 3, 3, -1, -1]], [[4, 4, 4, 4, -1],
    # [5, 5, 5, 5, 5]]], [[[6, 6, 6, 6, 6, 6], [-1, -1, -1, -1, -1, -1]], [[8, -1, -1, -1, -1,
    # -1], [9, 9, -1, -1, -1, -1]]]; spec PerReplicaSpec(TensorSpec((None, None), int64) x 2)
    strategy = ds.MirroredStrategy(["/cpu:0", "/cpu:1"])
    dist = strategy.experimental_distribute_dataset(
        _rows(9).padded_batch(5, padding_values=np.int64(-1))
    )
    steps = [[v.tolist() for v in strategy.experimental_local_results(x)] for x in dist]
    assert steps == [
        [
            [[1, -1, -1, -1, -1], [2, 2, -1, -1, -1], [3, 3, 3, -1, -1]],
            [[4, 4, 4, 4, -1], [5, 5, 5, 5, 5]],
        ],
        [
            [[6, 6, 6, 6, 6, 6], [-1, -1, -1, -1, -1, -1]],
            [[8, -1, -1, -1, -1, -1], [9, 9, -1, -1, -1, -1]],
        ],
    ]
    assert str(dist.element_spec).count("TensorSpec(shape=(None, None), dtype=int64") == 2
    # V7.padded_batch(3, padded_shapes=[6]): third step [[[0, 0, 0, 0, 0, 0]], []] (an empty
    # piece for replica 1); spec (None, 6) per replica; drop_remainder=True: spec (2, None)
    dist = strategy.experimental_distribute_dataset(_rows(7).padded_batch(3, padded_shapes=[6]))
    last = [strategy.experimental_local_results(x) for x in dist][-1]
    assert [v.tolist() for v in last] == [[[0, 0, 0, 0, 0, 0]], []]
    assert last[1].shape == (0, 6)
    dist = strategy.experimental_distribute_dataset(_rows(7).padded_batch(4, drop_remainder=True))
    assert str(dist.element_spec).count("TensorSpec(shape=(2, None), dtype=int64") == 2


# --- flat_map and interleave -------------------------------------------------------------------


def ints(ds: Dataset) -> list[int]:
    return [int(x) for x in ds]


def test_flat_map_flattens_the_returned_datasets_cardinality_unknown() -> None:
    # R(4).flat_map(lambda x: R(x)): 0, 0, 1, 0, 1, 2; spec TensorSpec((), int64); card -2
    ds_ = R(4).flat_map(lambda x: R(x))
    assert ints(ds_) == [0, 0, 1, 0, 1, 2] and ds_.element_spec == I64 and card(ds_) == -2
    # R(3).repeat().flat_map(lambda x: R(x)).cardinality() -> -2 (infinite input too)
    assert card(R(3).repeat().flat_map(lambda x: R(x))) == -2
    # D.from_tensor_slices(([1, 2], [3, 4])).flat_map(lambda a, b:
    #   D.from_tensor_slices(tf.fill([a], b))): int32 3, 4, 4; spec TensorSpec((), int32)
    pairs = D.from_tensor_slices(([1, 2], [3, 4])).flat_map(
        lambda a, b: D.from_tensor_slices(np.full((int(a),), b))
    )
    assert items(pairs) == [("int32", 3), ("int32", 4), ("int32", 4)]
    assert pairs.element_spec == TensorSpec((), np.int32)
    # R(4).flat_map(lambda x: D.from_tensors(tf.fill([x], x))): [], [1], [2, 2], [3, 3, 3];
    # spec TensorSpec((None,), int64)
    rows = R(4).flat_map(lambda x: D.from_tensors(np.full((int(x),), x)))
    assert rows.element_spec == TensorSpec((None,), np.int64)
    assert [r.tolist() for r in rows] == [[], [1], [2, 2], [3, 3, 3]]


def test_flat_map_and_interleave_need_a_dataset() -> None:
    # R(3).flat_map(lambda x: [x]): TypeError "The `map_func` argument must return a `Dataset`
    # object. Got <class 'tuple'>."; lambda x: x: AttributeError "'Tensor' object has no
    # attribute '_name'" (interleave the same)
    with pytest.raises(TypeError, match=r"must return a `Dataset` object\. Got <class 'tuple'>\."):
        R(3).flat_map(lambda x: [x])
    with pytest.raises(AttributeError, match="'Tensor' object has no attribute '_name'"):
        R(3).flat_map(lambda x: x)
    with pytest.raises(AttributeError, match="'Tensor' object has no attribute '_name'"):
        R(5).interleave(lambda x: x)


def _repeats(cycle: Any, block: Any, **kwargs: Any) -> list[int]:
    ds_ = R(1, 7).interleave(
        lambda x: D.from_tensors(x).repeat(x), cycle_length=cycle, block_length=block, **kwargs
    )
    return ints(ds_)


def test_interleave_order_as_tf() -> None:
    # R(1, 7).interleave(lambda x: D.from_tensors(x).repeat(x), cycle_length=c, block_length=b)
    assert _repeats(1, 3) == [1, 2, 2, 3, 3, 3, 4, 4, 4, 4, 5, 5, 5, 5, 5, 6, 6, 6, 6, 6, 6]
    assert _repeats(2, 1) == [1, 2, 2, 3, 3, 4, 3, 4, 4, 5, 4, 5, 5, 6, 5, 6, 5, 6, 6, 6, 6]
    assert _repeats(2, 2) == [1, 2, 2, 3, 3, 3, 4, 4, 5, 5, 4, 4, 5, 5, 5, 6, 6, 6, 6, 6, 6]
    assert _repeats(3, 2) == [1, 2, 2, 3, 3, 4, 4, 3, 4, 4, 5, 5, 6, 6, 5, 5, 6, 6, 5, 6, 6]
    assert _repeats(4, 3) == [1, 2, 2, 3, 3, 3, 4, 4, 4, 5, 5, 5, 6, 6, 6, 4, 5, 5, 6, 6, 6]
    assert _repeats(4, None) == [1, 2, 3, 4, 2, 3, 4, 5, 3, 4, 5, 6, 4, 5, 6, 5, 6, 5, 6, 6, 6]
    # num_parallel_calls=2 (deterministic default): the same order;
    # R(1, 8).interleave(lambda x: R(10*x, 10*x + x % 4), cycle_length=3, block_length=2,
    #   num_parallel_calls=2): 10, 20, 21, 30, 31, 32, 50, 60, 61, 70, 71, 72
    assert _repeats(3, 2, num_parallel_calls=2) == _repeats(3, 2)
    gaps = R(1, 8).interleave(
        lambda x: R(10 * x, 10 * x + x % 4), cycle_length=3, block_length=2, num_parallel_calls=2
    )
    assert ints(gaps) == [10, 20, 21, 30, 31, 32, 50, 60, 61, 70, 71, 72]
    # R(6).interleave(lambda x: R(x).batch(2), cycle_length=2):
    # [0], [0, 1], [0, 1], [0, 1], [2], [2, 3], [0, 1], [2, 3], [4]; spec (None,); card -2
    batches = R(6).interleave(lambda x: R(x).batch(2), cycle_length=2)
    want = [[0], [0, 1], [0, 1], [0, 1], [2], [2, 3], [0, 1], [2, 3], [4]]
    assert [b.tolist() for b in batches] == want
    assert batches.element_spec == TensorSpec((None,), np.int64) and card(batches) == -2


def test_interleave_default_cycle_length_is_the_cpu_count() -> None:
    # TF: cycle_length=None (and -1, AUTOTUNE) is port::MaxParallelism(), the CPUs the process
    # may use (on the 2-CPU machine the pins were printed on, None gave cycle_length=2's order)
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    assert _repeats(None, 2) == _repeats(cpus, 2) == _repeats(-1, 2)


def test_interleave_argument_errors() -> None:
    # cycle_length=0 / -2: InvalidArgumentError 'cycle_length must be greater than zero.';
    # block_length=0 / -1: 'block_length must be greater than zero.'; num_parallel_calls=0:
    # 'num_parallel_calls must be greater than zero.'; cycle_length=1, num_parallel_calls=2:
    # 'If `cycle_length` is set to a fixed value, `num_parallel_calls` must be either
    # `tf.data.AUTOTUNE` or a value less than or equal to `cycle_length`. However,
    # `num_parallel_calls` is 2 and `cycle_length` is 1'; cycle_length=2.0: TypeError
    cases: list[tuple[dict[str, Any], str]] = [
        ({"cycle_length": 0}, "cycle_length must be greater than zero"),
        ({"cycle_length": -2}, "cycle_length must be greater than zero"),
        ({"block_length": 0}, "block_length must be greater than zero"),
        ({"block_length": -1}, "block_length must be greater than zero"),
        ({"num_parallel_calls": 0}, "num_parallel_calls must be greater than zero"),
        ({"num_parallel_calls": -3}, "num_parallel_calls must be greater than zero"),
        ({"cycle_length": 1, "num_parallel_calls": 2}, "`num_parallel_calls` is 2 and `cycle"),
    ]
    for kwargs, message in cases:
        with pytest.raises(errors.InvalidArgumentError, match=message):
            R(5).interleave(lambda x: R(x), **kwargs)
    with pytest.raises(TypeError, match=r"Cannot convert 2\.0 to EagerTensor of dtype int64"):
        R(5).interleave(lambda x: R(x), cycle_length=2.0)


# --- reduce, scan, take_while, apply, get_single_element, unique -------------------------------


def test_reduce_folds_into_the_initial_states_structure() -> None:
    # R(5).reduce(np.int64(0), lambda s, x: s + x) -> int64 10 (a tensor: a 0-d array here)
    total = R(5).reduce(np.int64(0), lambda s, x: s + x)
    assert isinstance(total, np.ndarray) and total.dtype == np.int64 and total.tolist() == 10
    # R(0).reduce(np.int64(7), ...) -> 7; a pair state -> (10, 120)
    assert R(0).reduce(np.int64(7), lambda s, x: s + x).tolist() == 7
    pair = R(5).reduce((np.int64(0), np.int64(1)), lambda s, x: (s[0] + x, s[1] * (x + 1)))
    assert [p.tolist() for p in pair] == [10, 120]
    # R(5).reduce(np.int64(0), lambda s, x: [s + x]) -> int64 10 (packed as the state)
    assert R(5).reduce(np.int64(0), lambda s, x: [s + x]).tolist() == 10
    # a tuple element is one argument: D.from_tensor_slices(([1, 2], [3., 4.])).reduce(
    #   np.float32(0), lambda s, e: s + e[1]) -> float32 7.0; lambda s, a, b: TypeError
    # "<lambda>() missing 1 required positional argument: 'b'"
    pairs = D.from_tensor_slices(([1, 2], [3.0, 4.0]))
    got = pairs.reduce(np.float32(0), lambda s, e: s + e[1])
    assert got.dtype == np.float32 and got.tolist() == 7.0
    with pytest.raises(TypeError, match="missing 1 required positional argument: 'b'"):
        pairs.reduce(np.float32(0), lambda s, a, b: s + b)
    # the state's shape may change: R(4).reduce(tf.fill([0], 0), lambda s, x: tf.fill([x], x))
    # -> [3, 3, 3]
    assert (
        R(4).reduce(np.zeros(0, np.int64), lambda s, x: np.full((int(x),), x)).tolist() == [3] * 3
    )
    # R(5).reduce(np.float64(0.1), lambda s, x: s * 1.5) -> float64 0.7593750000000001
    assert (
        R(5).reduce(np.float64(0.1), lambda s, x: s * 1.5).tobytes()
        == np.float64(0.7593750000000001).tobytes()
    )


def test_reduce_and_scan_state_errors() -> None:
    # R(5).reduce(np.float32(0), lambda s, x: tf.cast(x, tf.int32)): TypeError 'The element
    # types for the new state must match the initial state. Expected <dtype: 'float32'> but got
    # <dtype: 'int32'>.'
    with pytest.raises(
        TypeError,
        match=r"initial state\. Expected <dtype: 'float32'> but got <dtype: 'int32'>\.",
    ):
        R(5).reduce(np.float32(0), lambda s, x: x.astype(np.int32))
    # R(5).reduce(np.int64(0), lambda s, x: (s, x)): InvalidArgumentError 'The number of
    # components of the initial state and the reduce function output does not match.
    # (initial_state=1, output=2).'
    with pytest.raises(errors.InvalidArgumentError, match=r"\(initial_state=1, output=2\)"):
        R(5).reduce(np.int64(0), lambda s, x: (s, x))
    # R(5).reduce(None, ...): TypeError 'issubclass() arg 1 must be a class'
    with pytest.raises(TypeError, match=r"issubclass\(\) arg 1 must be a class"):
        R(5).reduce(None, lambda s, x: s)
    # R(5).scan(np.int64(0), lambda s, x: (tf.cast(s, tf.int32), x)): TypeError 'Invalid
    # `scan_func`. The element types for the new state must match the initial state. Expected
    # <dtype: 'int64'>, got <dtype: 'int32'>.'
    with pytest.raises(TypeError, match=r"Expected <dtype: 'int64'>, got <dtype: 'int32'>\."):
        R(5).scan(np.int64(0), lambda s, x: (s.astype(np.int32), x))
    # R(5).scan(np.int64(0), lambda s, x: s + x): TypeError 'Invalid `scan_func`. `scan_func`
    # should return a pair consisting of new state and the output value but its return type is
    # TensorSpec(shape=(), dtype=tf.int64, name=None).'; (s + x,): '... is
    # (TensorSpec(shape=(), dtype=tf.int64, name=None),).'
    pair_error = "should return a pair consisting of new state and the output value but its"
    with pytest.raises(TypeError, match=pair_error + r" return type is TensorSpec\(shape=\(\), "):
        R(5).scan(np.int64(0), lambda s, x: s + x)
    with pytest.raises(TypeError, match=r"return type is \(TensorSpec\(shape=\(\), dtype=tf.int64"):
        R(5).scan(np.int64(0), lambda s, x: (s + x,))


def test_scan_outputs_spec_and_cardinality() -> None:
    # R(5).scan(np.int64(0), lambda s, x: (s + x, s * x)): 0, 0, 2, 9, 24; spec int64 (); card 5
    ds_ = R(5).scan(np.int64(0), lambda s, x: (s + x, s * x))
    assert items(ds_) == [("int64", v) for v in (0, 0, 2, 9, 24)]
    assert ds_.element_spec == I64 and card(ds_) == 5
    # (s + x, (s, x)): (0, 0), (0, 1), (1, 2), (3, 3), (6, 4)
    ds_ = R(5).scan(np.int64(0), lambda s, x: (s + x, (s, x)))
    assert [(int(a), int(b)) for a, b in ds_] == [(0, 0), (0, 1), (1, 2), (3, 3), (6, 4)]
    # R(5).scan(0, lambda s, x: (s + 1, x)): an int32 state; outputs int64 0..4
    assert items(R(5).scan(0, lambda s, x: (s + 1, x))) == [("int64", v) for v in range(5)]
    # cardinality: repeat() -> -1, filter -> -2
    assert card(R(5).repeat().scan(np.int64(0), lambda s, x: (s + x, s))) == -1
    assert card(R(5).filter(lambda x: x > 2).scan(np.int64(0), lambda s, x: (s + x, s))) == -2
    # a state whose shape changes is relaxed: R(4).scan(tf.fill([0], 0), lambda s, x:
    # (tf.fill([x], x), s)) -> [], [], [1], [2, 2]; spec TensorSpec((None,), int64)
    rows = R(4).scan(np.zeros(0, np.int64), lambda s, x: (np.full((int(x),), x), s))
    assert rows.element_spec == TensorSpec((None,), np.int64)
    assert [r.tolist() for r in rows] == [[], [], [1], [2, 2]]
    # a nested state: R(5).scan((np.int64(0), np.float32(1)), lambda s, x: ((s[0] + x,
    # s[1] * 2), s[1])) -> float32 1, 2, 4, 8, 16
    halves = R(5).scan((np.int64(0), np.float32(1)), lambda s, x: ((s[0] + x, s[1] * 2), s[1]))
    assert items(halves) == [("float32", v) for v in (1.0, 2.0, 4.0, 8.0, 16.0)]


def test_take_while_stops_at_the_first_false_and_checks_the_predicate() -> None:
    # R(10).take_while(lambda x: x < 4): 0..3, cardinality -2
    ds_ = R(10).take_while(lambda x: x < 4)
    assert ints(ds_) == [0, 1, 2, 3] and card(ds_) == -2
    # a tuple element is separate arguments: D.from_tensor_slices(([1, 2, 3], [3., 4., 5.]))
    #   .take_while(lambda a, b: b < 4.5) -> (1, 3.0), (2, 4.0)
    pairs = D.from_tensor_slices(([1, 2, 3], [3.0, 4.0, 5.0])).take_while(lambda a, b: b < 4.5)
    assert [(int(a), float(b)) for a, b in pairs] == [(1, 3.0), (2, 4.0)]
    # R(10).take_while(lambda x: x): ValueError 'Invalid `predicate`. `predicate` must return a
    # `tf.bool` scalar tensor but its return type isTensorSpec(shape=(), dtype=tf.int64,
    # name=None).'
    with pytest.raises(ValueError, match=r"return type isTensorSpec\(shape=\(\), dtype=tf\.int64"):
        R(10).take_while(lambda x: x)
    # lambda x: [x < 4]: AttributeError "'tuple' object has no attribute 'is_compatible_with'"
    with pytest.raises(AttributeError, match="'tuple' object has no attribute 'is_compatible"):
        R(10).take_while(lambda x: [x < 4])
    # tf.data.experimental compute_batch_size(R(10).batch(3).take_while(...)) -> -1
    assert dd.compute_batch_size(R(10).batch(3).take_while(lambda x: x.size > 0)) == -1


def test_apply_and_get_single_element() -> None:
    # R(5).apply(lambda d: d.batch(2)): [0, 1], [2, 3], [4]; lambda d: 3: TypeError
    # '`transformation_func` must return a `tf.data.Dataset` object. Got <class 'int'>.'
    assert [b.tolist() for b in R(5).apply(lambda d: d.batch(2))] == [[0, 1], [2, 3], [4]]
    with pytest.raises(TypeError, match=r"Dataset` object\. Got <class 'int'>\."):
        R(5).apply(lambda d: 3)
    # R(1).get_single_element() -> int64 0; from_tensors((1, {'a': 2.0})) -> the structure
    one = R(1).get_single_element()
    assert isinstance(one, np.ndarray) and one.dtype == np.int64 and one.tolist() == 0
    nested = D.from_tensors((np.int64(1), {"a": np.float32(2)})).get_single_element()
    assert nested[0].tolist() == 1 and nested[1]["a"].dtype == np.float32
    # R(0): InvalidArgumentError 'Dataset was empty.'; R(2) and R(3).repeat(): 'Dataset had more
    # than one element.'
    with pytest.raises(errors.InvalidArgumentError, match="Dataset was empty"):
        R(0).get_single_element()
    for many in (R(2), R(3).repeat()):
        with pytest.raises(errors.InvalidArgumentError, match="had more than one element"):
            many.get_single_element()


def test_unique_keeps_first_occurrences_of_int_and_string_elements() -> None:
    # D.from_tensor_slices([1, 2, 1, 3, 2]).unique(): int32 1, 2, 3; cardinality -2
    ds_ = D.from_tensor_slices([1, 2, 1, 3, 2]).unique()
    assert items(ds_) == [("int32", 1), ("int32", 2), ("int32", 3)] and card(ds_) == -2
    # vectors: D.from_tensor_slices(np.array([[1, 2], [1, 2]], np.int64)).unique() -> [1, 2];
    # spec (2,); a dict of one component and strings work too
    vectors = D.from_tensor_slices(np.array([[1, 2], [1, 2]], np.int64)).unique()
    assert [v.tolist() for v in vectors] == [[1, 2]]
    assert vectors.element_spec == TensorSpec((2,), np.int64)
    assert [d["a"].tolist() for d in D.from_tensor_slices({"a": [1, 2, 1]}).unique()] == [1, 2]
    assert [bytes(s) for s in D.from_tensor_slices([b"a", b"b", b"a"]).unique()] == [b"a", b"b"]
    # float32, uint8, int16, bool: TypeError '`tf.data.Dataset.unique` does not support type
    # <dtype: 'float32'> -- only `tf.int32`, `tf.int64`, and `tf.string` are supported.'
    for values in ([1.0, 2.0], np.array([1], np.uint8), np.array([1], np.int16), [True]):
        with pytest.raises(TypeError, match="does not support type <dtype: '"):
            D.from_tensor_slices(values).unique()
    # two components: InvalidArgumentError 'UniqueDataset only supports inputs with a single
    # component.'
    with pytest.raises(errors.InvalidArgumentError, match="only supports inputs with a single"):
        D.from_tensor_slices(([1, 2], [1, 2])).unique()
