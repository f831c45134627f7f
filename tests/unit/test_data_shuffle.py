"""``Dataset.shuffle(buffer_size, seed=...)`` gives TF 2.21's order, bit for bit.

Every literal below was recorded from TF 2.21 (``tf.data``, eager, no global seed). TF's
``ShuffleDatasetOp`` draws ``Philox() % n`` from the buffer's oldest element on and moves that
element into the hole; each iterator takes its seeds from the dataset's seed generator
(``data/_shuffle.py``). Digests are the first 16 hex digits of the SHA-256 of the int64 values
in order (for TF: ``np.concatenate([...]).astype(np.int64).tobytes()``).
"""

from __future__ import annotations

import hashlib
import re

import numpy as np
import pytest

from mwms_mpi import data
from mwms_mpi.data._random import Stream, philox_outputs

Dataset = data.Dataset


def tolist(ds: Dataset) -> list[int]:
    return [int(v) for v in ds]


def digest(arrays: list[np.ndarray]) -> str:
    flat = np.concatenate([np.asarray(a, np.int64).ravel() for a in arrays])
    return hashlib.sha256(flat.tobytes()).hexdigest()[:16]


def test_epochs_reshuffle_and_repeat_are_tfs() -> None:
    # TF: three passes over range(10).shuffle(4, seed=1)
    ds = Dataset.range(10).shuffle(4, seed=1)
    first = [0, 4, 5, 1, 2, 7, 9, 8, 6, 3]
    second = [2, 1, 3, 4, 6, 8, 7, 9, 5, 0]
    third = [3, 1, 0, 4, 6, 5, 9, 8, 2, 7]
    assert [tolist(ds), tolist(ds), tolist(ds)] == [first, second, third]
    # repeat after shuffle: each epoch a new iterator of the same seed generator
    assert tolist(Dataset.range(10).shuffle(4, seed=1).repeat(3)) == first + second + third
    twice = Dataset.range(10).shuffle(4, seed=1).repeat(2)
    assert tolist(twice) == first + second
    assert tolist(twice) == [*third, 0, 2, 1, 4, 7, 8, 9, 6, 3, 5]
    # reshuffle_each_iteration=False: the op's own seeds every time
    fixed = Dataset.range(10).shuffle(4, seed=1, reshuffle_each_iteration=False)
    assert tolist(fixed) == tolist(fixed) == [3, 4, 0, 5, 2, 7, 8, 9, 1, 6]
    # repeat before shuffle: one buffer over the repeated input
    repeated = Dataset.range(5).repeat(3).shuffle(4, seed=2)
    assert tolist(repeated) == [0, 2, 4, 1, 3, 1, 2, 4, 1, 0, 2, 0, 4, 3, 3]


def test_buffers_and_seeds_are_tfs() -> None:
    # a buffer larger than the input, and UNKNOWN_CARDINALITY (the whole input), alike
    whole = [0, 9, 5, 1, 2, 7, 3, 8, 6, 4]
    assert tolist(Dataset.range(10).shuffle(100, seed=1)) == whole
    assert tolist(Dataset.range(10).shuffle(data.UNKNOWN_CARDINALITY, seed=1)) == whole
    assert tolist(Dataset.range(6).shuffle(1, seed=3)) == list(range(6))  # buffer 1: identity
    # seeds: 0 is a seed like any other, negatives and 2**64 are taken mod 2**31 - 1 first
    assert tolist(Dataset.range(10).shuffle(10, seed=0)) == [2, 0, 1, 4, 5, 6, 9, 7, 8, 3]
    assert tolist(Dataset.range(10).shuffle(10, seed=-5)) == [6, 5, 3, 2, 7, 8, 1, 0, 9, 4]
    assert tolist(Dataset.range(10).shuffle(10, seed=2**64)) == [1, 7, 2, 5, 4, 0, 6, 3, 8, 9]
    # TF: shuffle(seed='x') fails in its seed truncation, 1.5 in the int64 conversion
    with pytest.raises(TypeError, match="not all arguments converted during string formatting"):
        Dataset.range(5).shuffle(3, seed="x")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=re.escape("Cannot convert 1.5 to EagerTensor")):
        Dataset.range(5).shuffle(3, seed=1.5)  # type: ignore[arg-type]


def test_a_long_streaming_shuffle_is_tfs() -> None:
    # 3000 elements through a buffer of 7: thousands of draws, several Philox chunks
    out = tolist(Dataset.range(3000).shuffle(7, seed=3))
    assert out[:8] == [5, 2, 0, 6, 10, 8, 3, 9]
    assert out[-8:] == [2993, 2992, 2985, 2996, 2991, 2999, 2997, 2998]
    assert digest([np.array(out)]) == "afab6d325533093b"


@pytest.mark.parametrize("gathered", [True, False], ids=["gathered", "row-by-row"])
def test_whole_buffer_epochs_are_tfs(gathered: bool) -> None:
    # The benchmark's pipeline, eleven passes (past the epochs whose draws are computed
    # together), and the same without reshuffling.
    source = Dataset.from_tensor_slices(np.arange(1500))
    if not gathered:
        source = source.map(lambda v: v)
    want = [
        ("042971c420da4f91", [1120, 562, 165, 905, 197, 742]),
        ("875e88af13d91e37", [1078, 1336, 1443, 353, 26, 761]),
        ("813d17c397bba73d", [315, 779, 1389, 389, 310, 170]),
        ("964b2ef9dcfbd6e6", [1056, 6, 1132, 482, 327, 1200]),
        ("f4dd53492ed9c9b7", [642, 118, 618, 964, 676, 472]),
        ("6b97d0d68eaa0cbf", [318, 700, 716, 247, 555, 313]),
        ("978a9ba6d496ad5b", [1492, 1442, 1100, 252, 1001, 419]),
        ("e183dbb835a1b9c7", [379, 554, 382, 1309, 1488, 426]),
        ("bbf1583ed80919c7", [656, 1118, 1193, 856, 10, 262]),
        ("a3b87895c76982c9", [107, 1119, 59, 711, 486, 310]),
        ("114dfa01aa07d468", [1298, 1251, 962, 283, 1391, 1129]),
    ]
    ds = source.shuffle(1500, seed=1).batch(64)
    for want_digest, head in want:
        batches = list(ds)
        assert (digest(batches), batches[0][:6].tolist()) == (want_digest, head)
    fixed = source.shuffle(1500, seed=1, reshuffle_each_iteration=False).batch(64)
    for _ in range(2):
        batches = list(fixed)
        assert digest(batches) == "7fc28839a8bc93f7"
        assert batches[0][:6].tolist() == [627, 922, 1435, 106, 649, 569]


def test_structured_elements_shuffle_as_tf() -> None:
    x = np.arange(6)
    ds = (
        Dataset.from_tensor_slices({"a": x, "b": (x * 0.5).astype(np.float32)})
        .filter(lambda d: d["a"] != 2)
        .shuffle(3, seed=9)
        .batch(2)
    )
    got = [(e["a"].tolist(), e["b"].tolist(), e["b"].dtype) for e in ds]
    # TF: {'a': [1, 3], 'b': [0.5, 1.5]}, {'a': [0, 4], 'b': [0., 2.]}, {'a': [5], 'b': [2.5]}
    assert got == [
        ([1, 3], [0.5, 1.5], np.float32),
        ([0, 4], [0.0, 2.0], np.float32),
        ([5], [2.5], np.float32),
    ]


def test_an_unseeded_shuffle_is_random() -> None:
    # TF draws its own seeds then; so does this: two datasets shuffle differently
    orders = {tuple(tolist(Dataset.range(40).shuffle(40))) for _ in range(3)}
    assert len(orders) == 3 and all(sorted(o) == list(range(40)) for o in orders)


def test_vectorised_philox_is_the_stream() -> None:
    seeds = [(87654321, 1), (0, 0), (2**64 - 1, 2**64 - 1), (123, 2**63 + 5), (-7, -(2**63))]
    want = []
    for pair in seeds:
        stream = Stream.seeded(*pair)
        want.append([stream() for _ in range(40)])
    got = philox_outputs(seeds, 0, 10)
    assert got.dtype == np.uint32 and got.tolist() == want
    assert philox_outputs(seeds[1:3], 3, 7).tolist() == [w[12:] for w in want[1:3]]
    assert philox_outputs(seeds, 2, 0).shape == (5, 0)


@pytest.mark.parametrize("value", [1, 0, "x", [], 2.5, np.bool_(True), np.array(False)])
def test_bool_attributes_must_be_bools_like_tf(value: object) -> None:
    # TF's op attributes take a Python bool only (None: the default), e.g.
    # TypeError: Expected bool for argument 'reshuffle_each_iteration' not 1.
    for make, argument in (
        (lambda: Dataset.range(6).shuffle(6, seed=1, reshuffle_each_iteration=value), "reshuffle"),
        (lambda: Dataset.random(seed=1, rerandomize_each_iteration=value), "rerandomize"),
    ):
        message = f"Expected bool for argument '{argument}_each_iteration' not {value!r}."
        with pytest.raises(TypeError, match=re.escape(message)):
            make()
    assert tolist(Dataset.range(6).shuffle(6, seed=1, reshuffle_each_iteration=None)) == [
        4,
        5,
        1,
        2,
        3,
        0,
    ]  # TF: None is the default, True
