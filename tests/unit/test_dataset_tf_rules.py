"""tf.data rules an audit found mwms_mpi.data getting wrong, pinned to literal TF 2.21 outputs.

Every expectation was printed by ``/tmp/tfvenv/bin/python`` (tensorflow-cpu 2.21.0) running the
expression in the comment above it, with ``D = tf.data.Dataset`` and ``R = D.range``.
"""

from __future__ import annotations

import numpy as np
import pytest

from mwms_mpi import errors
from mwms_mpi.data import Dataset, TensorSpec
from mwms_mpi.data import distribute as dd

D = Dataset
R = Dataset.range


def card(ds: Dataset) -> int:
    return int(ds.cardinality())


def values(ds: Dataset) -> list:
    return [np.asarray(x).tolist() for x in ds]


# --- what map returns: only a top-level list is a tuple ----------------------------------------


def test_map_turns_only_a_top_level_list_into_a_tuple() -> None:
    # R(2).map(lambda x: (x, [x, x])): spec (TensorSpec((), int64), TensorSpec((2,), int64)),
    # elements (0, [0, 0]) (1, [1, 1])
    ds = R(2).map(lambda x: (x, [x, x]))
    assert ds.element_spec == (TensorSpec((), np.int64), TensorSpec((2,), np.int64))
    assert [(int(a), b.tolist()) for a, b in ds] == [(0, [0, 0]), (1, [1, 1])]
    # R(2).map(lambda x: {'a': [x, x]}): {'a': TensorSpec((2,), int64)}
    assert R(2).map(lambda x: {"a": [x, x]}).element_spec == {"a": TensorSpec((2,), np.int64)}
    # R(1).map(lambda x: [[1, 2], [3, 4]]): (TensorSpec((2,), int32), TensorSpec((2,), int32)),
    # element ([1, 2], [3, 4])
    nested = R(1).map(lambda x: [[1, 2], [3, 4]])
    assert nested.element_spec == (TensorSpec((2,), np.int32), TensorSpec((2,), np.int32))
    assert [tuple(a.tolist() for a in e) for e in nested] == [([1, 2], [3, 4])]
    # R(5).map(lambda x: {'a': [x, x], 'b': (x, [x])}): {'a': (2,), 'b': ((), (1,))}
    assert R(5).map(lambda x: {"a": [x, x], "b": (x, [x])}).element_spec == {
        "a": TensorSpec((2,), np.int64),
        "b": (TensorSpec((), np.int64), TensorSpec((1,), np.int64)),
    }
    # R(5).map(lambda x: [x, (x,)]): (TensorSpec((), int64), (TensorSpec((), int64),))
    assert R(5).map(lambda x: [x, (x,)]).element_spec == (
        TensorSpec((), np.int64),
        (TensorSpec((), np.int64),),
    )


# --- map's element_spec never claims a dim the elements may lack --------------------------------


def test_map_spec_of_a_slice_of_an_unknown_dim_is_unknown() -> None:
    # R(5).batch(2).map(lambda x: x[0:2]): TensorSpec((None,), int64); [0, 1] [2, 3] [4]
    ds = R(5).batch(2).map(lambda x: x[0:2])
    assert ds.element_spec == TensorSpec((None,), np.int64)
    assert values(ds) == [[0, 1], [2, 3], [4]]
    # R(5).batch(2).map(lambda x: x[:1]).element_spec: TensorSpec((None,), int64)
    assert R(5).batch(2).map(lambda x: x[:1]).element_spec == TensorSpec((None,), np.int64)


def test_map_spec_of_a_value_dependent_shape_is_unknown() -> None:
    # R(5).map(lambda x: tf.zeros(x // 2 + 1)): TensorSpec((None,), float32); then .batch(2):
    # TensorSpec((None, None), float32)
    ds = R(5).map(lambda x: np.zeros([int(x) // 2 + 1], np.float32))
    assert ds.element_spec == TensorSpec((None,), np.float32)
    assert [len(v) for v in values(ds)] == [1, 1, 2, 2, 3]
    assert ds.batch(2).element_spec == TensorSpec((None, None), np.float32)
    # R(5).batch(2).map(lambda x: tf.range(x[0])): TensorSpec((None,), int64)
    assert R(5).batch(2).map(lambda x: np.arange(x[0])).element_spec == TensorSpec(
        (None,), np.int64
    )


def test_map_spec_keeps_the_static_dims_tf_keeps() -> None:
    # R(5).batch(2, drop_remainder=True).map(lambda x: x * 2): TensorSpec((2,), int64)
    assert R(5).batch(2, True).map(lambda x: x * 2).element_spec == TensorSpec((2,), np.int64)
    # R(5).batch(2, drop_remainder=True).map(lambda x: x[0:1]): TensorSpec((1,), int64)
    assert R(5).batch(2, True).map(lambda x: x[0:1]).element_spec == TensorSpec((1,), np.int64)
    # R(5).batch(2).map(lambda x: x * 2): (None,); x[0]: (); tf.reduce_sum(x): ()
    assert R(5).batch(2).map(lambda x: x * 2).element_spec == TensorSpec((None,), np.int64)
    assert R(5).batch(2).map(lambda x: x[0]).element_spec == TensorSpec((), np.int64)
    assert R(5).batch(2).map(lambda x: x.sum()).element_spec == TensorSpec((), np.int64)
    # R(5).map(lambda x: tf.zeros([3])): TensorSpec((3,), float32)
    assert R(5).map(lambda x: np.zeros([3], np.float32)).element_spec == TensorSpec(
        (3,), np.float32
    )
    rows = D.from_tensor_slices(np.zeros((5, 3), np.float32)).batch(2)
    # rows.map(lambda x: tf.reduce_sum(x, axis=0)): (3,); tf.reshape(x, [-1]): (None,);
    # tf.transpose(x): (3, None)
    assert rows.map(lambda x: x.sum(axis=0)).element_spec == TensorSpec((3,), np.float32)
    assert rows.map(lambda x: x.reshape(-1)).element_spec == TensorSpec((None,), np.float32)
    assert rows.map(lambda x: x.T).element_spec == TensorSpec((3, None), np.float32)
    # R(5).batch(2).map(lambda x: tf.stack([x, x])): TensorSpec((2, None), int64)
    assert R(5).batch(2).map(lambda x: np.stack([x, x])).element_spec == TensorSpec(
        (2, None), np.int64
    )


def test_a_map_slice_no_longer_fakes_a_static_batch_for_distribution() -> None:
    # With TF's (None,) spec, compute_batch_size walks the pipeline and stops at the map: -1
    # (docs/input_semantics.md: "a map after batch gives -1").
    assert dd.compute_batch_size(R(5).batch(2).map(lambda x: x[0:2])) == -1
    assert dd.compute_batch_size(R(6).batch(2, True).map(lambda x: x * 2)) == 2


# --- cardinality ------------------------------------------------------------------------------


def test_unbatch_cardinality_with_a_static_leading_dim() -> None:
    # R(6).batch(2, drop_remainder=True).unbatch(): 6; len 6
    assert card(R(6).batch(2, True).unbatch()) == 6
    assert len(R(6).batch(2, True).unbatch()) == 6
    # D.from_tensors(np.zeros((3, 2))).unbatch(): 3
    assert card(D.from_tensors(np.zeros((3, 2))).unbatch()) == 3
    # D.from_tensor_slices({'a': [[1, 2], [3, 4]]}).unbatch(): 4
    assert card(D.from_tensor_slices({"a": [[1, 2], [3, 4]]}).unbatch()) == 4
    # D.from_tensor_slices({'a': np.zeros((2, 3, 2)), 'b': np.zeros((2, 3))}).unbatch(): 6
    mixed = {"a": np.zeros((2, 3, 2)), "b": np.zeros((2, 3))}
    assert card(D.from_tensor_slices(mixed).unbatch()) == 6
    # R(6).batch(2).unbatch(): -2; R(6).batch(2, True).repeat().unbatch(): -1;
    # R(6).batch(2, True).filter(lambda x: True).unbatch(): -2; R(6).batch(2, True).take(0)
    # .unbatch(): 0; R(6).batch(2).take(0).unbatch(): -2
    assert card(R(6).batch(2).unbatch()) == -2
    assert card(R(6).batch(2, True).repeat().unbatch()) == -1
    assert card(R(6).batch(2, True).filter(lambda x: True).unbatch()) == -2
    assert card(R(6).batch(2, True).take(0).unbatch()) == 0
    assert card(R(6).batch(2).take(0).unbatch()) == -2


def test_concatenate_infinite_and_unknown_is_infinite() -> None:
    # R(3).repeat().concatenate(R(3).filter(lambda x: x > 0)): -1, and the other order: -1
    unknown = R(3).filter(lambda x: x > 0)
    assert card(R(3).repeat().concatenate(unknown)) == -1
    assert card(unknown.concatenate(R(3).repeat())) == -1
    # R(3).repeat().concatenate(R(2)): -1; R(2).concatenate(unknown): -2
    assert card(R(3).repeat().concatenate(R(2))) == -1
    assert card(R(2).concatenate(unknown)) == -2


def test_take_cardinality_with_negative_counts() -> None:
    # [card(R(5).take(n)) for n in (-1, -2, -3, 0, 3, 7)]: [5, -2, -3, 0, 3, 5]
    assert [card(R(5).take(n)) for n in (-1, -2, -3, 0, 3, 7)] == [5, -2, -3, 0, 3, 5]
    # [card(R(5).repeat().take(n)) for n in (-1, -2, -3)]: [-1, -2, -3]
    assert [card(R(5).repeat().take(n)) for n in (-1, -2, -3)] == [-1, -2, -3]
    # filter().take(-1), take(-2): -2, -2
    assert [card(R(5).filter(lambda x: True).take(n)) for n in (-1, -2)] == [-2, -2]
    # list(R(5).take(-2)), take(-3): every element
    assert values(R(5).take(-2)) == values(R(5).take(-3)) == [0, 1, 2, 3, 4]


# --- concatenate's structure ------------------------------------------------------------------


def test_concatenate_yields_dicts_in_the_first_datasets_key_order() -> None:
    # [list(d) for d in S({'a': [1], 'b': [2]}).concatenate(S({'b': [3], 'a': [4]}))
    #  .as_numpy_iterator()]: [['a', 'b'], ['a', 'b']]
    first = D.from_tensor_slices({"a": [1], "b": [2]})
    both = first.concatenate(D.from_tensor_slices({"b": [3], "a": [4]}))
    out = list(both.as_numpy_iterator())
    assert [list(d) for d in out] == [["a", "b"], ["a", "b"]]
    assert [(int(d["a"]), int(d["b"])) for d in out] == [(1, 2), (4, 3)]


# --- errors -----------------------------------------------------------------------------------


def test_an_element_without_components_is_refused() -> None:
    # D.from_tensors(()), D.from_tensors({}), D.from_tensors(None), D.from_tensors(((),)):
    # InvalidArgumentError "Length for attr 'Toutput_types' of 0 must be at least minimum 1 ..."
    for empty in ((), {}, None, ((),)):
        with pytest.raises(errors.InvalidArgumentError, match="must be at least minimum 1"):
            D.from_tensors(empty)
    # D.from_tensors((1, ())).element_spec: (TensorSpec((), int32), ())
    assert D.from_tensors((1, ())).element_spec == (TensorSpec((), np.int32), ())
    # R(2).map(lambda x: ()), lambda x: [], lambda x: {}, lambda x: None: InvalidArgumentError
    # "Length for attr 'output_types' of 0 must be at least minimum 1 ... MapDataset"
    for func in (lambda x: (), lambda x: [], lambda x: {}, lambda x: None):
        with pytest.raises(errors.InvalidArgumentError, match="must be at least minimum 1"):
            R(2).map(func)
    # R(2).map(lambda x: (x, ())).element_spec: (TensorSpec((), int64), ())
    assert R(2).map(lambda x: (x, ())).element_spec == (TensorSpec((), np.int64), ())
    # D.from_tensor_slices(()), ({}), (((),)), (None): ValueError
    # 'Invalid `element`. `element` should not be empty.'
    for empty in ((), {}, ((),), None):
        with pytest.raises(ValueError, match="`element` should not be empty"):
            D.from_tensor_slices(empty)


def test_a_dict_inside_a_list_is_refused_with_a_value_error() -> None:
    # D.from_tensor_slices([{'a': 1}, {'a': 2}]), D.from_tensors([{'a': 1}]): ValueError
    # "Attempt to convert a value ({'a': 1}) with an unsupported type (<class 'dict'>) to a Tensor."
    message = "Attempt to convert a value \\(\\{'a': 1\\}\\) with an unsupported type"
    with pytest.raises(ValueError, match=message):
        D.from_tensor_slices([{"a": 1}, {"a": 2}])
    with pytest.raises(ValueError, match=message):
        D.from_tensors([{"a": 1}])


def test_rebatch_of_scalars_fails_when_called() -> None:
    # R(6).rebatch(2), R(6).rebatch([1, 2]): ValueError 'Invalid `batch_sizes`. Expected dataset
    # with rank of >= 1 but found a dataset with scalar elements. Fix the issue by adding the
    # `batch` transformation to the dataset.'
    for sizes in (2, [1, 2]):
        with pytest.raises(ValueError, match="Expected dataset with rank of >= 1"):
            R(6).rebatch(sizes)


def test_unbatch_of_static_mismatched_leading_dims_fails_when_called() -> None:
    # D.from_tensors(([1, 2], [3, 4, 5])).unbatch(): ValueError '`unbatch()` is only supported
    # for datasets of elements whose components have a matching leading dimension. Encountered
    # both 2 and 3.' (also for a dict {'a': zeros(2), 'b': zeros(3)})
    message = "matching leading dimension. Encountered both 2 and 3."
    with pytest.raises(ValueError, match=message):
        D.from_tensors(([1, 2], [3, 4, 5])).unbatch()
    with pytest.raises(ValueError, match=message):
        D.from_tensors({"a": np.zeros(2), "b": np.zeros(3)}).unbatch()


# --- range ------------------------------------------------------------------------------------


def test_range_takes_a_bool_and_wraps_into_its_output_type() -> None:
    # list(R(True)): [0] (int64)
    ds = R(True)
    assert values(ds) == [0] and ds.element_spec == TensorSpec((), np.int64)
    # list(R(2**31 - 1, 2**31 + 1, output_type=tf.int32)): [2147483647, -2147483648]
    wrapped = R(2**31 - 1, 2**31 + 1, output_type=np.int32)
    assert values(wrapped) == [2147483647, -2147483648] and card(wrapped) == 2
    # list(R(250, 260, 3, output_type=tf.uint8)): [250, 253, 0, 3]
    assert values(R(250, 260, 3, output_type=np.uint8)) == [250, 253, 0, 3]


# --- map followed by batch (TF fuses them: map_and_batch_fusion, on by default) -----------------


def test_map_then_batch_copies_by_element_count_as_tf_fused_kernel() -> None:
    # TF 2.21 rewrites map(f).batch(n) into MapAndBatchDataset, whose copy checks only the
    # number of elements of each component against the first element's:
    # D.range(2).map(f).batch(2), f giving reshape(range(6), [2, 3]) then [3, 2]:
    # [[[[0, 1, 2], [3, 4, 5]], [[0, 1, 2], [3, 4, 5]]]] (the second one reshaped);
    # with a prefetch between them (no fusion): 'Cannot batch tensors with different shapes in
    # component 0. First element had shape [2,3] and element 1 had shape [3,2].';
    # D.range(2).map(lambda x: tf.range(x + 1)).batch(2): InvalidArgumentError 'Cannot add
    # tensor to the batch: number of elements does not match. Shapes are: [tensor]: [2],
    # [batch]: [1]'
    def f(x: np.ndarray) -> np.ndarray:
        return np.arange(6).reshape((3, 2) if x > 0 else (2, 3))

    assert [b.tolist() for b in D.range(2).map(f).batch(2)] == [[[[0, 1, 2], [3, 4, 5]]] * 2]
    with pytest.raises(errors.InvalidArgumentError, match=r"First element had shape \[2,3\]"):
        list(D.range(2).map(f).prefetch(1).batch(2))
    with pytest.raises(errors.InvalidArgumentError) as raised:
        list(D.range(2).map(lambda x: np.arange(x + 1)).batch(2))
    assert str(raised.value) == (
        "Cannot add tensor to the batch: number of elements does not match. Shapes are: "
        "[tensor]: [2], [batch]: [1]"
    )


def test_rebatch_of_components_with_different_known_batch_dims_fails_when_called() -> None:
    # TF's _compute_static_batch_dim: D.from_tensors((zeros(2), zeros(3))).rebatch(1):
    # ValueError 'Invalid `input_dataset.` The batch dimension of component 0 is 2, while the
    # batch dimension of component i is [2 3].'; with drop_remainder=True the spec is
    # [(1,), (1,)] and no error
    with pytest.raises(ValueError, match=r"component 0 is 2, .* component i is \[2 3\]\.$"):
        D.from_tensors((np.zeros(2), np.zeros(3))).rebatch(1)
    dropped = D.from_tensors((np.zeros(2), np.zeros(3))).rebatch(1, drop_remainder=True)
    assert dropped.element_spec == (TensorSpec((1,), np.float64), TensorSpec((1,), np.float64))
