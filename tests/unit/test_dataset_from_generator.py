"""``Dataset.from_generator`` as TF 2.21's: the values, dtypes, specs, cardinality, errors and
distribution below are what TF printed for the same programs (TF is never imported here)."""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pytest

import mwms_mpi.distribute as ds
from mwms_mpi import errors
from mwms_mpi.data import Dataset, TensorSpec

PAIR = (TensorSpec((), np.int64), TensorSpec((None,), np.float32))


def _pairs() -> Any:
    yield (1, [1.5, 2.5])
    yield (2, [3, 4])


def test_values_spec_and_cardinality() -> None:
    data = Dataset.from_generator(_pairs, output_signature=PAIR)
    assert data.element_spec == PAIR and int(data.cardinality()) == -2
    got = [(a, a.dtype, b, b.dtype) for a, b in data]
    assert [(int(a), str(da), b.tolist(), str(db)) for a, da, b, db in got] == [
        (1, "int64", [1.5, 2.5], "float32"),
        (2, "int64", [3.0, 4.0], "float32"),
    ]
    assert len(list(data.repeat(2))) == 4  # the generator is called for every epoch
    legacy = Dataset.from_generator(_pairs, (np.int64, np.float32), ((), (2,)))
    assert legacy.element_spec == (TensorSpec((), np.int64), TensorSpec((2,), np.float32))
    # numpy's casting, as TF's FuncRegistry._convert: 1.5 into int64 is 1
    one = Dataset.from_generator(lambda: iter([1.5]), output_signature=TensorSpec((), np.int64))
    assert list(one.as_numpy_iterator()) == [1]
    # args are converted as tf.constant (3 is int32, 2.0 float32) and passed positionally
    scaled = Dataset.from_generator(
        lambda n, s: (i * s for i in range(int(n))),
        args=(3, 2.0),
        output_signature=TensorSpec((), np.float32),
    )
    assert list(scaled.as_numpy_iterator()) == [0.0, 2.0, 4.0]
    dicts = Dataset.from_generator(
        lambda: iter([{"a": 1, "b": [1, 2]}]),
        output_signature={"a": TensorSpec((), np.int32), "b": TensorSpec((2,), np.int64)},
    )
    (element,) = list(dicts.as_numpy_iterator())
    assert element["a"] == 1 and element["b"].dtype == np.int64


def test_yielded_buffers_are_copied() -> None:
    """TF copies each yielded value into a tensor, so a generator may refill one buffer."""
    buffer = np.zeros(2, np.float32)

    def refill() -> Any:
        for i in range(3):
            buffer[:] = i
            yield buffer

    data = Dataset.from_generator(refill, output_signature=TensorSpec((2,), np.float32))
    assert [e.tolist() for e in data] == [[0.0, 0.0], [1.0, 1.0], [2.0, 2.0]]


def test_tf_errors() -> None:
    def zeros() -> Any:
        yield np.zeros(3)

    cases = [
        (TensorSpec((2,), np.float64), "an element of shape (3,) where an element of shape (2,)"),
        ((TensorSpec((3,), np.float64),), "did not match the expected structure"),
    ]
    for spec, text in cases:
        with pytest.raises(errors.InvalidArgumentError, match=re.escape(text)):
            list(Dataset.from_generator(zeros, output_signature=spec))
    with pytest.raises(errors.InvalidArgumentError, match="could not be converted to the expected"):
        list(
            Dataset.from_generator(
                lambda: iter(["ab"]), output_signature=TensorSpec((), np.float32)
            )
        )
    listed = (TensorSpec((), np.int32), TensorSpec((), np.int32))
    with pytest.raises(errors.InvalidArgumentError, match="did not match the expected structure"):
        list(Dataset.from_generator(lambda: iter([[1, 2]]), output_signature=listed))
    with pytest.raises(TypeError, match="either the `output_signature` argument or the `output_t"):
        Dataset.from_generator(_pairs)
    with pytest.raises(TypeError, match="can not be used together with the `output_signature`"):
        Dataset.from_generator(_pairs, output_types=np.int64, output_signature=PAIR)
    with pytest.raises(
        TypeError, match=r"must contain objects that are subclass of `tf\.TypeSpec`"
    ):
        Dataset.from_generator(_pairs, output_signature=3)
    with pytest.raises(TypeError, match=r"`generator` must be a Python callable\."):
        Dataset.from_generator(3, output_signature=PAIR)
    with pytest.raises(ValueError, match="unknown rank"):  # TF's specs of unknown rank
        Dataset.from_generator(_pairs, output_types=(np.int64, np.float32))


def test_distributed_as_tf_distributes_it() -> None:
    def gen() -> Any:
        for i in range(10):
            yield i, np.full((2,), i * 0.5)

    spec = (TensorSpec((), np.int64), TensorSpec((2,), np.float32))
    data = Dataset.from_generator(gen, output_signature=spec).batch(4)
    assert data.element_spec == (TensorSpec((None,), np.int64), TensorSpec((None, 2), np.float32))
    strategy = ds.MirroredStrategy(["/cpu:0", "/cpu:1"])
    steps = []
    for x in strategy.experimental_distribute_dataset(data):
        local = [strategy.experimental_local_results(c) for c in x]
        steps.append([(a.tolist(), b.tolist()) for a, b in zip(*local, strict=True)])
    assert steps == [
        [([0, 1], [[0.0, 0.0], [0.5, 0.5]]), ([2, 3], [[1.0, 1.0], [1.5, 1.5]])],
        [([4, 5], [[2.0, 2.0], [2.5, 2.5]]), ([6, 7], [[3.0, 3.0], [3.5, 3.5]])],
        [([8], [[4.0, 4.0]]), ([9], [[4.5, 4.5]])],
    ]
