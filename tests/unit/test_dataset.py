"""mwms_mpi.data against numpy and against literal TF 2.21 outputs (commands in the comments).

TF outputs were produced with /tmp/tfvenv/bin/python (tensorflow-cpu 2.21.0), e.g.
``list(tf.data.Dataset.range(2, 10, 3).as_numpy_iterator())``.
"""

from __future__ import annotations

import collections
import re

import numpy as np
import pytest

from mwms_mpi import data, errors
from mwms_mpi.data import (
    INFINITE_CARDINALITY,
    UNKNOWN_CARDINALITY,
    Dataset,
    TensorSpec,
    experimental,
)

Point = collections.namedtuple("Point", "x y")


def tolist(ds: Dataset) -> list:
    return [np.asarray(x).tolist() for x in ds]


def card(ds: Dataset) -> int:
    return int(ds.cardinality())


# --- sources -------------------------------------------------------------------------------


def test_range_like_tf() -> None:
    # TF: range(5) -> [0..4] int64; range(2,10,3) -> [2, 5, 8]; range(10,2,-2) -> [10, 8, 6, 4]
    assert tolist(Dataset.range(5)) == [0, 1, 2, 3, 4]
    assert tolist(Dataset.range(2, 10, 3)) == [2, 5, 8]
    assert tolist(Dataset.range(10, 2, -2)) == [10, 8, 6, 4]
    # TF: TensorSpec(shape=(), dtype=tf.int64, name=None); output_type=tf.int32 -> int32
    assert Dataset.range(5).element_spec == TensorSpec((), np.int64)
    assert Dataset.range(3, output_type=np.int32).element_spec == TensorSpec((), np.int32)
    assert card(Dataset.range(10, 2, -2)) == 4


def test_range_errors_like_tf() -> None:
    # TF: ValueError 'Invalid `args`. The length of `args` should be between 1 and 3 but was 0.'
    with pytest.raises(ValueError, match=r"between 1 and 3 but was 0\.$"):
        Dataset.range()
    with pytest.raises(ValueError, match="but was 4"):
        Dataset.range(1, 2, 3, 4)
    # TF: InvalidArgumentError '... step must be a non-zero integer. [Op:RangeDataset] ...'
    with pytest.raises(errors.InvalidArgumentError, match="step must be a non-zero integer"):
        Dataset.range(0, 5, 0)
    # TF: TypeError 'Cannot convert 0.5 to EagerTensor of dtype int64'
    with pytest.raises(
        TypeError, match=re.escape("Cannot convert 0.5 to EagerTensor of dtype int64")
    ):
        Dataset.range(0.5)


def test_iteration_types() -> None:
    # TF's __iter__ yields 0-d tensors (here 0-d arrays); as_numpy_iterator yields numpy
    # scalars: TF: [<class 'numpy.int64'>, <class 'numpy.int64'>]
    first = next(iter(Dataset.range(2)))
    assert isinstance(first, np.ndarray) and first.shape == () and first.dtype == np.int64
    assert [type(x) for x in Dataset.range(2).as_numpy_iterator()] == [np.int64, np.int64]


def test_from_tensor_slices_converts_like_tf_constant() -> None:
    # TF: [np.int32(1), np.int32(2), np.int32(3)]
    ds = Dataset.from_tensor_slices([1, 2, 3])
    assert list(ds.as_numpy_iterator()) == [1, 2, 3]
    assert ds.element_spec == TensorSpec((), np.int32)
    # TF: [1.5, 2.0] -> float32; [True, False] -> bool; np.arange(3.) -> float64; [1, 2.5] -> f32
    assert Dataset.from_tensor_slices([1.5, 2.0]).element_spec.dtype == np.float32
    assert Dataset.from_tensor_slices([True, False]).element_spec.dtype == np.bool_
    assert Dataset.from_tensor_slices(np.arange(3.0)).element_spec.dtype == np.float64
    assert Dataset.from_tensor_slices([1, 2.5]).element_spec.dtype == np.float32
    assert Dataset.from_tensor_slices([1, 2**40]).element_spec.dtype == np.int64
    # TF: list of arrays is one tensor: [array([1, 2]), array([3, 4])]
    assert tolist(Dataset.from_tensor_slices([np.array([1, 2]), np.array([3, 4])])) == [
        [1, 2],
        [3, 4],
    ]
    # TF: list of tuples too: [array([1, 2], dtype=int32), array([3, 4], dtype=int32)]
    assert tolist(Dataset.from_tensor_slices([(1, 2), (3, 4)])) == [[1, 2], [3, 4]]
    # TF: strings as bytes: [b'a', b'bc']
    assert list(Dataset.from_tensor_slices(["a", "bc"]).as_numpy_iterator()) == [b"a", b"bc"]


def test_from_tensor_slices_errors_like_tf() -> None:
    # TF: ValueError 'Dimensions 2 and 3 are not compatible'
    with pytest.raises(ValueError, match=r"^Dimensions 2 and 3 are not compatible$"):
        Dataset.from_tensor_slices(([1, 2], [1, 2, 3]))
    # TF: ValueError 'Unbatching a tensor is only supported for rank >= 1'
    with pytest.raises(ValueError, match="only supported for rank >= 1"):
        Dataset.from_tensor_slices(1)
    # TF: ValueError "Can't convert non-rectangular Python sequence to Tensor."
    with pytest.raises(ValueError, match="non-rectangular"):
        Dataset.from_tensor_slices([[1, 2], [3]])
    # TF: tf.constant([True, 1]) -> "Can't convert Python sequence with mixed types to Tensor."
    with pytest.raises(ValueError, match="mixed types"):
        Dataset.from_tensor_slices([True, 1])
    # TF: ValueError 'Invalid `element`. `element` should not be empty.'
    with pytest.raises(ValueError, match="should not be empty"):
        Dataset.from_tensor_slices(None)


def test_from_tensor_slices_structures() -> None:
    # TF: [(np.int32(1), np.float32(3.0)), (np.int32(2), np.float32(4.0))]
    ds = Dataset.from_tensor_slices(([1, 2], [3.0, 4.0]))
    out = list(ds.as_numpy_iterator())
    assert out == [(1, 3.0), (2, 4.0)]
    assert [type(v) for v in out[0]] == [np.int32, np.float32]
    assert ds.element_spec == (TensorSpec((), np.int32), TensorSpec((), np.float32))
    # TF keeps the dict's own key order: [{'b': np.int32(1), 'a': array([1, 2])}, ...]
    ds = Dataset.from_tensor_slices({"b": [1, 2], "a": [[1, 2], [3, 4]]})
    first = next(ds.as_numpy_iterator())
    assert list(first) == ["b", "a"]
    assert first["b"] == 1 and first["a"].tolist() == [1, 2]
    assert ds.element_spec == {"b": TensorSpec((), np.int32), "a": TensorSpec((2,), np.int32)}
    # TF: [P(x=np.int64(0), y=array([0, 1])), P(x=np.int64(1), y=array([2, 3]))]
    ds = Dataset.from_tensor_slices(Point(np.arange(2), np.arange(4).reshape(2, 2)))
    out = list(ds.as_numpy_iterator())
    assert type(out[1]) is Point and out[1].x == 1 and out[1].y.tolist() == [2, 3]


def test_from_tensor_slices_owns_its_data() -> None:
    source = np.arange(4)
    ds = Dataset.from_tensor_slices(source)
    source[0] = 99
    for element in ds:
        element[...] = -1  # mutating a yielded element must not change the next epoch
    assert tolist(ds) == [0, 1, 2, 3]


def test_from_tensors() -> None:
    # TF: ([array([1, 2], dtype=int32)], TensorSpec(shape=(2,), dtype=tf.int32, name=None))
    ds = Dataset.from_tensors([1, 2])
    assert tolist(ds) == [[1, 2]]
    assert ds.element_spec == TensorSpec((2,), np.int32)
    assert card(ds) == 1
    # TF: [(np.int32(1), np.float32(2.0))]
    assert list(Dataset.from_tensors((1, 2.0)).as_numpy_iterator()) == [(1, 2.0)]


# --- batch / unbatch / rebatch --------------------------------------------------------------


def test_batch_like_tf() -> None:
    # TF: [array([0, 1, 2]), array([3, 4, 5]), array([6, 7])]; spec shape (None,)
    ds = Dataset.range(8).batch(3)
    assert tolist(ds) == [[0, 1, 2], [3, 4, 5], [6, 7]]
    assert ds.element_spec == TensorSpec((None,), np.int64)
    # TF drop_remainder: [[0,1,2],[3,4,5]], TensorSpec(shape=(3,), ...)
    ds = Dataset.range(8).batch(3, drop_remainder=True)
    assert tolist(ds) == [[0, 1, 2], [3, 4, 5]]
    assert ds.element_spec == TensorSpec((3,), np.int64)
    # TF: (TensorSpec(shape=(None, 2), float64), TensorSpec(shape=(None,), int64))
    ds = Dataset.from_tensor_slices((np.zeros((5, 2)), np.arange(5))).batch(2)
    assert ds.element_spec == (TensorSpec((None, 2), np.float64), TensorSpec((None,), np.int64))


def test_batch_matches_numpy() -> None:
    data = np.arange(30.0).reshape(10, 3)
    got = list(Dataset.from_tensor_slices(data).batch(4))
    np.testing.assert_array_equal(np.concatenate(got), data)
    assert [len(b) for b in got] == [4, 4, 2]


def test_batch_errors_like_tf() -> None:
    # TF: InvalidArgumentError 'Batch size must be greater than zero.' (0 and -1)
    for size in (0, -1):
        with pytest.raises(errors.InvalidArgumentError, match="Batch size must be greater"):
            Dataset.range(8).batch(size)


def test_batch_of_tuples_like_tf() -> None:
    # TF: [(array([1, 2], dtype=int32), array([4., 5.], dtype=float32)), (array([3]), ...)]
    out = list(Dataset.from_tensor_slices(([1, 2, 3], [4.0, 5.0, 6.0])).batch(2))
    assert [tuple(a.tolist() for a in b) for b in out] == [([1, 2], [4.0, 5.0]), ([3], [6.0])]
    assert out[0][1].dtype == np.float32


def test_unbatch_like_tf() -> None:
    # TF: range(8).batch(3).unbatch() -> 0..7, TensorSpec(shape=(), int64); card -2
    ds = Dataset.range(8).batch(3).unbatch()
    assert tolist(ds) == list(range(8))
    assert ds.element_spec == TensorSpec((), np.int64)
    assert card(ds) == UNKNOWN_CARDINALITY
    # TF: ValueError 'Cannot unbatch an input with scalar components.'
    with pytest.raises(
        ValueError, match=re.escape("Cannot unbatch an input with scalar components.")
    ):
        Dataset.range(3).unbatch()


@pytest.mark.parametrize("sizes", [0, [0, 0]])
def test_rebatch_to_only_empty_batches_is_refused(sizes: object) -> None:
    # TF yields empty batches forever (the loop never ends); an error says why instead.
    with pytest.raises(errors.InvalidArgumentError, match="empty batches forever"):
        Dataset.range(4).batch(2).rebatch(sizes)
    assert tolist(Dataset.range(4).batch(2).rebatch([0, 2])) == [[], [0, 1], [], [2, 3], []]


def test_rebatch_like_tf() -> None:
    # TF: range(14).batch(8).rebatch([3, 1]) ->
    # [[0, 1, 2], [3], [4, 5, 6], [7], [8, 9, 10], [11], [12, 13]]
    assert tolist(Dataset.range(14).batch(8).rebatch([3, 1])) == [
        [0, 1, 2],
        [3],
        [4, 5, 6],
        [7],
        [8, 9, 10],
        [11],
        [12, 13],
    ]
    # TF: crosses input batches: range(14).batch(8).repeat(2).rebatch([4, 4]) ->
    # [[0..3], [4..7], [8..11], [12, 13, 0, 1], [2..5], [6..9], [10..13]]
    assert tolist(Dataset.range(14).batch(8).repeat(2).rebatch([4, 4]))[3] == [12, 13, 0, 1]
    # TF: range(5).batch(5).rebatch([0, 5]) -> [[], [0, 1, 2, 3, 4], []]
    assert tolist(Dataset.range(5).batch(5).rebatch([0, 5])) == [[], [0, 1, 2, 3, 4], []]
    # TF specs: drop-8 input rebatched [4, 4] -> (4,); [2, 3, 3] -> (None,); non-drop -> (None,)
    drop8 = Dataset.range(16).batch(8, drop_remainder=True)
    assert drop8.rebatch([4, 4]).element_spec.shape == (4,)
    assert drop8.rebatch([2, 3, 3]).element_spec.shape == (None,)
    assert Dataset.range(16).batch(8).rebatch([4, 4]).element_spec.shape == (None,)
    assert card(Dataset.range(16).batch(8).rebatch([4, 4])) == UNKNOWN_CARDINALITY


# --- shard / repeat / take / skip / filter / map --------------------------------------------


def test_shard_like_tf() -> None:
    # TF: range(10).shard(3, 1) -> [1, 4, 7]; cardinalities of shards 0, 1, 2: (4, 3, 3)
    assert tolist(Dataset.range(10).shard(3, 1)) == [1, 4, 7]
    assert [card(Dataset.range(10).shard(3, i)) for i in range(3)] == [4, 3, 3]
    assert card(Dataset.range(10).repeat().shard(2, 0)) == INFINITE_CARDINALITY
    for n in (1, 2, 3, 5):
        parts = [tolist(Dataset.range(11).shard(n, i)) for i in range(n)]
        assert sorted(v for part in parts for v in part) == list(range(11))


def test_shard_errors_like_tf() -> None:
    # TF: 'Index must be between 0 and 2 (currently index = 3).' and '... index = -1).'
    with pytest.raises(
        errors.InvalidArgumentError, match=r"between 0 and 2 \(currently index = 3\)"
    ):
        Dataset.range(10).shard(3, 3)
    with pytest.raises(errors.InvalidArgumentError, match=r"currently index = -1\)"):
        Dataset.range(10).shard(3, -1)
    # TF: 'Number of shards must be greater than zero (currently num_shards = 0).'
    with pytest.raises(
        errors.InvalidArgumentError,
        match=r"Number of shards must be greater than zero \(currently num_shards = 0\)\.",
    ):
        Dataset.range(10).shard(0, 0)


def test_repeat_like_tf() -> None:
    # TF: range(3).repeat(2) -> [0, 1, 2, 0, 1, 2]; repeat(0) -> []
    assert tolist(Dataset.range(3).repeat(2)) == [0, 1, 2, 0, 1, 2]
    assert tolist(Dataset.range(3).repeat(0)) == []
    # TF cardinalities: repeat() -1, repeat(-1) -1, repeat(2) 6, range(0).repeat() 0
    assert card(Dataset.range(3).repeat()) == INFINITE_CARDINALITY
    assert card(Dataset.range(3).repeat(-1)) == INFINITE_CARDINALITY
    assert card(Dataset.range(3).repeat(2)) == 6
    assert card(Dataset.range(0).repeat()) == 0
    assert tolist(Dataset.range(0).repeat()) == []
    assert tolist(Dataset.range(3).repeat().take(7)) == [0, 1, 2, 0, 1, 2, 0]


def test_take_skip_like_tf() -> None:
    # TF: take(3) -> [0, 1, 2]; take(-1) -> all; range(3).take(10) -> [0, 1, 2]
    assert tolist(Dataset.range(10).take(3)) == [0, 1, 2]
    assert tolist(Dataset.range(10).take(-1)) == list(range(10))
    assert tolist(Dataset.range(3).take(10)) == [0, 1, 2]
    assert card(Dataset.range(10).take(-1)) == 10
    # TF: skip(7) -> [7, 8, 9]; skip(-1) -> []; cardinality of skip(20) 0, skip(-1) 0
    assert tolist(Dataset.range(10).skip(7)) == [7, 8, 9]
    assert tolist(Dataset.range(10).skip(-1)) == []
    assert card(Dataset.range(10).skip(20)) == 0
    assert card(Dataset.range(10).skip(-1)) == 0
    # TF: take(None) -> ValueError 'Attempt to convert a value (None) with an unsupported type'
    with pytest.raises(ValueError, match=r"Attempt to convert a value \(None\)"):
        Dataset.range(3).take(None)  # type: ignore[arg-type]


def test_map_unpacks_like_tf() -> None:
    # TF: tuple element -> *args: [4, 6]; dict -> one arg: [3, 8]; namedtuple -> one arg: [-2, -2]
    assert tolist(Dataset.from_tensor_slices(([1, 2], [3, 4])).map(lambda a, b: a + b)) == [4, 6]
    by_dict = Dataset.from_tensor_slices({"a": [1, 2], "b": [3, 4]}).map(lambda d: d["a"] * d["b"])
    assert tolist(by_dict) == [3, 8]
    by_nt = Dataset.from_tensor_slices(Point([1, 2], [3, 4])).map(lambda p: p.x - p.y)
    assert tolist(by_nt) == [-2, -2]


def test_map_outputs_and_specs_like_tf() -> None:
    # TF: map(lambda x: (x, x * 2)) -> [(0, 0), (1, 2), (2, 4)], a tuple of int64 specs
    ds = Dataset.range(3).map(lambda x: (x, x * 2))
    assert list(ds.as_numpy_iterator()) == [(0, 0), (1, 2), (2, 4)]
    assert ds.element_spec == (TensorSpec((), np.int64), TensorSpec((), np.int64))
    # TF: a returned list becomes a tuple: [(np.int64(0), np.int64(0)), ...]
    out = list(Dataset.range(2).map(lambda x: [x, x]).as_numpy_iterator())
    assert out == [(0, 0), (1, 1)] and isinstance(out[0], tuple)
    # TF: map(lambda x: 1.5).element_spec -> TensorSpec(shape=(), dtype=tf.float32)
    assert Dataset.range(2).map(lambda x: 1.5).element_spec == TensorSpec((), np.float32)
    # Unknown dims stay unknown through map.
    batched = Dataset.from_tensor_slices(np.zeros((5, 3), np.float32)).batch(2)
    assert batched.map(lambda x: x * 2).element_spec == TensorSpec((None, 3), np.float32)
    assert batched.map(lambda x: x.sum(axis=0)).element_spec == TensorSpec((3,), np.float32)
    # TF: map keeps cardinality (3); filter makes it unknown (-2)
    assert card(Dataset.range(3).map(lambda x: x)) == 3


def test_map_spec_falls_back_to_a_real_element() -> None:
    def needs_positive(x: np.ndarray) -> np.ndarray:
        if x <= 0:
            raise ValueError("zero")
        return x * 2

    ds = Dataset.range(1, 4).map(needs_positive)
    assert ds.element_spec == TensorSpec((), np.int64)
    assert tolist(ds) == [2, 4, 6]


def test_filter_like_tf() -> None:
    # TF: range(10).filter(lambda x: x % 3 == 0) -> [0, 3, 6, 9]; cardinality -2
    ds = Dataset.range(10).filter(lambda x: x % 3 == 0)
    assert tolist(ds) == [0, 3, 6, 9]
    assert card(ds) == UNKNOWN_CARDINALITY
    assert card(Dataset.range(3).repeat().filter(lambda x: x > 0)) == UNKNOWN_CARDINALITY
    # TF: ValueError 'Invalid `predicate`. `predicate` must return a `tf.bool` scalar tensor,
    # but its return type is TensorSpec(shape=(), dtype=tf.int64, name=None).'
    with pytest.raises(ValueError, match=re.escape("must return a `tf.bool` scalar tensor")):
        list(Dataset.range(3).filter(lambda x: x))


# --- shuffle, prefetch, cache ---------------------------------------------------------------


def test_shuffle_is_a_seeded_permutation() -> None:
    ds = Dataset.range(50).shuffle(10, seed=7)
    first, second = tolist(ds), tolist(ds)
    assert sorted(first) == sorted(second) == list(range(50))
    assert first != second  # reshuffled per iteration (the default, as in TF)
    again = Dataset.range(50).shuffle(10, seed=7)
    assert tolist(again) == first and tolist(again) == second  # a function of seed and epoch
    assert tolist(Dataset.range(50).shuffle(10, seed=8)) != first


def test_shuffle_is_buffer_bounded() -> None:
    # With a buffer of b, element i can come out no earlier than position i - b + 1.
    out = tolist(Dataset.range(200).shuffle(5, seed=1))
    assert all(pos >= value - 4 for pos, value in enumerate(out))
    # TF: shuffle(1) is the identity: [0, 1, 2, 3, 4, 5]
    assert tolist(Dataset.range(6).shuffle(1, seed=3)) == list(range(6))
    assert sorted(tolist(Dataset.range(6).shuffle(UNKNOWN_CARDINALITY, seed=3))) == list(range(6))


def test_shuffle_reshuffle_flag_like_tf() -> None:
    # TF, reshuffle_each_iteration=False: both passes equal ([5, 4, 2, 0, 3, 1] twice), and
    # repeat(2) repeats the same order; with the default, repeat(2) reshuffles the second epoch.
    fixed = Dataset.range(20).shuffle(20, seed=3, reshuffle_each_iteration=False)
    assert tolist(fixed) == tolist(fixed)
    twice = tolist(fixed.repeat(2))
    assert twice[:20] == twice[20:]
    reshuffled = tolist(Dataset.range(20).shuffle(20, seed=3).repeat(2))
    assert reshuffled[:20] != reshuffled[20:]
    assert sorted(reshuffled[20:]) == list(range(20))
    # TF: shuffle(-1) -> 'buffer_size must be greater than zero or UNKNOWN_CARDINALITY'
    with pytest.raises(errors.InvalidArgumentError, match="greater than zero or UNKNOWN"):
        Dataset.range(6).shuffle(-1)
    with pytest.raises(errors.InvalidArgumentError):
        Dataset.range(6).shuffle(0)


def test_element_spec_does_not_advance_shuffle_epochs() -> None:
    def probe_hater(x: np.ndarray) -> np.ndarray:
        if x == 0:
            raise ValueError("no zeros")
        return x

    ds = Dataset.range(1, 30).shuffle(30, seed=5).map(probe_hater)
    reference = tolist(Dataset.range(1, 30).shuffle(30, seed=5))
    assert ds.element_spec == TensorSpec((), np.int64)  # needed a real (peeked) element
    assert tolist(ds) == reference


def test_prefetch_and_cache() -> None:
    # TF: prefetch(-5) -> 'buffer_size must be >= 0 or set buffer_size to be -1 for auto-tuning'
    assert tolist(Dataset.range(3).prefetch(experimental.AUTOTUNE)) == [0, 1, 2]
    with pytest.raises(errors.InvalidArgumentError, match="buffer_size must be >= 0"):
        Dataset.range(3).prefetch(-5)
    # cache freezes the first epoch's order, as TF's cache after shuffle does
    cached = Dataset.range(20).shuffle(20, seed=1).cache()
    assert tolist(cached) == tolist(cached)
    # TF: shuffle, prefetch and cache keep cardinality 10
    for ds in (Dataset.range(10).shuffle(4), Dataset.range(10).prefetch(2), cached.take(10)):
        assert card(ds) == 10


# --- cardinality, len, element_spec ---------------------------------------------------------


def test_cardinality_like_tf() -> None:
    # TF: range(10).batch(3) 4, batch(3, True) 3, repeat().batch(3) -1; repeat().take(5) 5;
    # filter().repeat() -1; filter().take(3) -2; repeat().skip(3) -1; from_tensors 1
    always = lambda x: True  # noqa: E731
    assert card(Dataset.range(10).batch(3)) == 4
    assert card(Dataset.range(10).batch(3, True)) == 3
    assert card(Dataset.range(10).repeat().batch(3)) == INFINITE_CARDINALITY
    assert card(Dataset.range(10).repeat().take(5)) == 5
    assert card(Dataset.range(10).filter(always).repeat()) == INFINITE_CARDINALITY
    assert card(Dataset.range(10).filter(always).take(3)) == UNKNOWN_CARDINALITY
    assert card(Dataset.range(10).repeat().skip(3)) == INFINITE_CARDINALITY
    assert Dataset.range(3).cardinality().dtype == np.int64
    assert (INFINITE_CARDINALITY, UNKNOWN_CARDINALITY) == (-1, -2)
    assert experimental.INFINITE_CARDINALITY == -1 and experimental.UNKNOWN_CARDINALITY == -2


def test_len_like_tf() -> None:
    # TF: len(range(5)) 5; infinite -> TypeError 'The dataset is infinite.'; unknown ->
    # TypeError 'The dataset length is unknown.'
    assert len(Dataset.range(5)) == 5
    with pytest.raises(TypeError, match=re.escape("The dataset is infinite.")):
        len(Dataset.range(5).repeat())
    with pytest.raises(TypeError, match=re.escape("The dataset length is unknown.")):
        len(Dataset.range(5).filter(lambda x: True))


def test_tensor_spec() -> None:
    spec = TensorSpec((None, 3), np.float32)
    # TF: 'TensorSpec(shape=(None, 3), dtype=tf.float32, name=None)' (numpy dtype names here)
    assert repr(spec) == "TensorSpec(shape=(None, 3), dtype=float32, name=None)"
    assert TensorSpec([2], np.int32) == TensorSpec((2,), np.int32)  # TF: True
    assert hash(TensorSpec([2], np.int32)) == hash(TensorSpec((2,), np.int32))
    assert spec.is_compatible_with(np.zeros((5, 3), np.float32))
    assert not spec.is_compatible_with(np.zeros((5, 4), np.float32))
    assert not spec.is_compatible_with(np.zeros((5, 3), np.float64))


def test_iterator_get_next() -> None:
    it = iter(Dataset.range(1))
    assert it.element_spec == TensorSpec((), np.int64)
    assert int(it.get_next()) == 0
    with pytest.raises(errors.OutOfRangeError):
        it.get_next()


def test_zip_and_concatenate_as_tf() -> None:
    # TF 2.21: zip stops at the shortest input, in the structure given; concatenate needs one
    # element structure and dtype (TypeError "Incompatible dataset elements" otherwise)
    a, b = data.Dataset.range(3), data.Dataset.from_tensor_slices(np.arange(10, 15))
    zipped = data.Dataset.zip({"x": a, "y": (b, a)})
    assert int(zipped.cardinality()) == 3
    first = next(iter(zipped))
    assert (int(first["x"]), int(first["y"][0]), int(first["y"][1])) == (0, 10, 0)
    assert int(data.Dataset.zip(a, b.repeat()).cardinality()) == 3
    both = a.concatenate(data.Dataset.range(5, 7))
    assert [int(v) for v in both] == [0, 1, 2, 5, 6] and int(both.cardinality()) == 5
    with pytest.raises(TypeError, match="Incompatible dataset elements"):
        a.concatenate(data.Dataset.from_tensor_slices(np.ones((2, 2), np.float32)))
    with pytest.raises(TypeError, match="Python `list` is not supported"):
        data.Dataset.zip([a, b])
    with pytest.raises(TypeError, match="at least one dataset"):
        data.Dataset.zip()


def test_a_map_whose_output_size_depends_on_values_has_an_unknown_dim() -> None:
    # TF traces range(offset, offset + size) to an unknown length; a zeros probe alone said 0
    pairs = data.Dataset.zip(
        (data.Dataset.from_tensor_slices([0, 8]), data.Dataset.from_tensor_slices([8, 4]))
    )
    mapped = pairs.map(lambda offset, size: np.arange(offset, offset + size))
    assert mapped.element_spec.shape == (None,)
