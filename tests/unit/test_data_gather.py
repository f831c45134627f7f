"""``batch`` over ``from_tensor_slices`` (shuffled or not) gathers each batch with one fancy index
per component (``_pipeline.Node.row_source``): the batches must be exactly those of the
row-by-row path, in the same order, epoch after epoch, and fresh arrays.

The row-by-row path is forced by an identity ``map`` (a map's output is not rows of a source).
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pytest

from mwms_mpi import data
from mwms_mpi.data._random import Stream, op_seeds


def _source() -> tuple[np.ndarray, ...]:
    rng = np.random.default_rng(3)
    return (
        rng.standard_normal((23, 4, 2)).astype(np.float32),
        np.arange(23, dtype=np.int64),
        rng.integers(0, 9, 23).astype(np.int32),
    )


def _build(gathered: bool, shuffles: list[dict[str, Any]], **batch: Any) -> Any:
    dataset = data.Dataset.from_tensor_slices(_source())
    if not gathered:
        dataset = dataset.map(lambda *row: row)
    for shuffle in shuffles:
        dataset = dataset.shuffle(**shuffle)
    return dataset.batch(5, **batch)


def _epochs(dataset: Any, n: int) -> list[list[tuple[np.ndarray, ...]]]:
    return [list(dataset) for _ in range(n)]


@pytest.mark.parametrize(
    "shuffles",
    [
        [],
        [{"buffer_size": 23, "seed": 1}],
        [{"buffer_size": 4, "seed": 7}],
        [{"buffer_size": 8, "seed": 2, "reshuffle_each_iteration": False}],
        [{"buffer_size": 6, "seed": 5}, {"buffer_size": 23, "seed": 9}],
    ],
    ids=["none", "full", "small-buffer", "no-reshuffle", "two"],
)
@pytest.mark.parametrize("drop_remainder", [False, True])
def test_gathered_batches_equal_row_by_row_batches(
    shuffles: list[dict[str, Any]], drop_remainder: bool
) -> None:
    fast = _build(True, shuffles, drop_remainder=drop_remainder)
    slow = _build(False, shuffles, drop_remainder=drop_remainder)
    assert fast._node.inputs[0].row_source() is not None  # the fast path is taken
    assert slow._node.inputs[0].row_source() is None
    got, want = _epochs(fast, 3), _epochs(slow, 3)
    assert [len(e) for e in got] == [4 if drop_remainder else 5] * 3
    for epoch_got, epoch_want in zip(got, want, strict=True):
        for batch_got, batch_want in zip(epoch_got, epoch_want, strict=True):
            for a, b in zip(batch_got, batch_want, strict=True):
                assert a.dtype == b.dtype and a.shape == b.shape
                assert a.flags.c_contiguous and a.flags.owndata
                np.testing.assert_array_equal(a, b)
    assert fast.element_spec == slow.element_spec
    if shuffles and shuffles[0].get("reshuffle_each_iteration", True):
        assert not np.array_equal(got[0][0][1], got[1][0][1])  # epochs differ, as TF's


def test_gathered_batches_are_fresh() -> None:
    source = _source()
    dataset = data.Dataset.from_tensor_slices(source).shuffle(23, seed=4).batch(5)
    first = list(dataset)
    for batch in first:
        for array in batch:
            array[...] = 0  # the caller owns what it got
    np.testing.assert_array_equal(np.sort(np.concatenate([b[1] for b in dataset])), source[1])
    np.testing.assert_array_equal(source[1], np.arange(23))


def _reference_order(n: int, buffer_size: int, seed: int, epoch: int) -> list[int]:
    """TF's ``ShuffleDatasetOp`` one draw at a time, with the scalar Philox stream
    (``_random.Stream``, itself checked against TF): each ``GetNext`` refills the buffer, takes
    ``Random() % size`` past its oldest element and moves the oldest into the hole. Epoch
    ``epoch``'s seeds are the seed generator's outputs ``2 * epoch`` and ``2 * epoch + 1``."""
    generator = Stream.seeded(*op_seeds(seed))
    for _ in range(2 * epoch):
        generator()
    stream = Stream.seeded(generator(), generator())
    source = iter(range(n))
    buffer: list[int] = []
    order = []
    while True:
        buffer.extend(itertools.islice(source, buffer_size - len(buffer)))
        if not buffer:
            return order
        index = stream() % len(buffer)
        order.append(buffer[index])
        buffer[index] = buffer[0]
        del buffer[0]


@pytest.mark.parametrize("gathered", [True, False], ids=["gathered", "row-by-row"])
@pytest.mark.parametrize(("n", "buffer_size"), [(0, 4), (1, 1), (23, 23), (23, 100), (23, 5)])
def test_shuffle_order_is_one_draw_per_element(gathered: bool, n: int, buffer_size: int) -> None:
    """The draws are computed as arrays (Philox blocks at once, the drain's bounds as one
    array): the order must stay the per-draw order."""
    dataset = data.Dataset.range(n)
    if not gathered:
        dataset = dataset.map(lambda v: v)
    else:
        dataset = data.Dataset.from_tensor_slices(np.arange(n, dtype=np.int64))
    dataset = dataset.shuffle(buffer_size, seed=11).batch(max(n, 1))
    for epoch in range(2):
        got = [int(v) for batch in dataset for v in batch]
        assert got == _reference_order(n, buffer_size, 11, epoch)
