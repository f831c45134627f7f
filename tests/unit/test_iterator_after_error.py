"""An iterator after an element's error: TF's goes on, ours says it cannot (never a silent end).

TF 2.21, ``Dataset.range(5).map(f)`` with ``f`` failing for 2 (through ``tf.py_function``):
``next`` gives ``0, 1, InvalidArgumentError, 3, 4``, then ``StopIteration``; with ``.batch(2)``
``[0, 1], InvalidArgumentError, [4]``. Ours raised the error, then ``StopIteration``: a loop that
catches the error and goes on saw the data end early. Now every later call raises
``UnimplementedError`` naming the first error.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from mwms_mpi import data, distribute, errors


def _failing_at_two(x: Any) -> Any:
    if int(x) == 2:
        raise ValueError("boom at 2")
    return np.asarray(x)


def _dataset(batch: bool) -> Any:
    ds = data.Dataset.range(5).map(_failing_at_two)
    return ds.batch(2) if batch else ds


@pytest.mark.parametrize("batch", [False, True])
@pytest.mark.parametrize("call", ["next", "get_next", "get_next_as_optional"])
def test_every_call_after_an_element_error_raises_naming_it(batch: bool, call: str) -> None:
    iterator = iter(_dataset(batch))

    def get() -> Any:
        if call == "next":
            return next(iterator)
        if call == "get_next":
            return iterator.get_next()
        return iterator.get_next_as_optional().get_value()

    first = get()
    assert np.asarray(first).tolist() == ([0, 1] if batch else 0)
    if not batch:
        assert int(get()) == 1
    with pytest.raises(ValueError, match="boom at 2"):
        get()
    for _ in range(2):  # not StopIteration, OutOfRangeError or an empty Optional
        with pytest.raises(errors.UnimplementedError, match=r"ValueError: boom at 2\).*TF's"):
            get()


def test_a_distributed_iterator_does_not_end_silently_either() -> None:
    strategy = distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    iterator = iter(strategy.experimental_distribute_dataset(_dataset(batch=True)))
    first = strategy.experimental_local_results(next(iterator))
    assert [np.asarray(v).tolist() for v in first] == [[0], [1]]
    with pytest.raises(ValueError, match="boom at 2"):
        next(iterator)
    with pytest.raises(errors.UnimplementedError, match="boom at 2"):
        next(iterator)


def test_the_end_is_still_the_end() -> None:
    iterator = iter(data.Dataset.range(2))
    assert [int(next(iterator)), int(next(iterator))] == [0, 1]
    for _ in range(2):
        with pytest.raises(StopIteration):
            next(iterator)
    assert not iterator.get_next_as_optional().has_value()
