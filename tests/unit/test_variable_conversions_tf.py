"""Python's scalar conversions of variables (``bool``, ``float``, ``int``, ``complex``, use as an
index), pinned from TF 2.21 (``/tmp/tfvenv``: a plain ``tf.Variable``, and
``MirroredStrategy(["/cpu:0", "/cpu:1"])`` over two logical CPUs for the distributed ones).

TF's ``BaseResourceVariable`` defines ``__bool__``, ``__float__``, ``__int__`` (on its read) but no
``__index__``; TF's ``DistributedVariable`` (``MirroredVariable``, ``SyncOnReadVariable``) defines
none of them, so Python's defaults apply: ``bool(v)`` is always ``True`` and ``float(v)`` raises,
in cross-replica and replica context alike.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pytest

import mwms_mpi
import mwms_mpi.distribute as ds
from mwms_mpi import errors

S = mwms_mpi.VariableSynchronization
A = mwms_mpi.VariableAggregation


def test_plain_variable_is_no_index() -> None:
    # TF: [1,2,3,4][tf.Variable(3)] RAISES TypeError list indices must be integers or slices,
    # not ResourceVariable; range(v) RAISES TypeError 'ResourceVariable' object cannot be
    # interpreted as an integer; the same for v.assign(3) (_UnreadVariable)
    v = mwms_mpi.Variable(3)
    with pytest.raises(TypeError, match="list indices must be integers or slices, not Variable"):
        _ = [1, 2, 3, 4][v]
    with pytest.raises(TypeError, match="'Variable' object cannot be interpreted as an integer"):
        range(v)
    with pytest.raises(TypeError, match="not UnreadVariable"):
        _ = [1, 2, 3, 4][v.assign(3)]
    # TF: int(v) 3, float(v) 3.0, complex(v) (3+0j) stay
    assert int(v) == 3 and float(v) == 3.0 and complex(v) == 3 + 0j


def test_plain_empty_variable_is_false() -> None:
    # TF: bool(tf.Variable(np.zeros((0,), np.float32))) -> False (EagerTensor's __bool__);
    # bool of two elements RAISES ValueError The truth value of an array with more than one ...
    v = mwms_mpi.Variable(np.zeros((0,), np.float32))
    assert bool(v) is False and bool(v.assign(np.zeros((0,), np.float32))) is False
    assert bool(mwms_mpi.Variable(np.ones((1,), np.float32))) is True
    with pytest.raises(ValueError, match="more than one element is ambiguous"):
        bool(mwms_mpi.Variable(np.zeros((2,), np.float32)))


@pytest.fixture(scope="module")
def strategy() -> ds.MirroredStrategy:
    return ds.MirroredStrategy(["/cpu:0", "/cpu:1"])


def _conversions(v: Any) -> list[Any]:
    out: list[Any] = [bool(v)]
    for convert in (float, int, complex, range):
        try:
            out.append(convert(v))
        except TypeError as e:
            out.append(str(e))
    return out


@pytest.mark.parametrize("sync", [S.ON_WRITE, S.ON_READ])
@pytest.mark.parametrize(
    "init", [np.float32(1.5), np.float32(0.0), np.int32(0), np.zeros((0,), np.float32)]
)
def test_distributed_variable_has_no_scalar_conversions(
    strategy: Any, sync: Any, init: Any
) -> None:
    # TF (each sync, each initial value): bool(v) True; float(v) RAISES TypeError float()
    # argument must be a string or a real number, not 'MirroredVariable'; int(v) RAISES
    # TypeError int() argument must be a string, a bytes-like object or a real number, not
    # 'MirroredVariable'; complex(v) RAISES TypeError complex() first argument must be a string
    # or a number, not 'MirroredVariable'; range(v) RAISES TypeError 'MirroredVariable' object
    # cannot be interpreted as an integer (SyncOnReadVariable alike)
    with strategy.scope():
        v = mwms_mpi.Variable(init, synchronization=sync, aggregation=A.SUM)
    name = type(v).__name__
    expected = [
        True,
        f"float() argument must be a string or a real number, not '{name}'",
        f"int() argument must be a string, a bytes-like object or a real number, not '{name}'",
        f"complex() first argument must be a string or a number, not '{name}'",
        f"'{name}' object cannot be interpreted as an integer",
    ]
    assert _conversions(v) == expected
    # TF: the same inside strategy.run (the type has none of them)
    per_replica = strategy.run(lambda: _conversions(v))
    for replica in strategy.experimental_local_results(per_replica):
        assert list(replica) == expected
    with pytest.raises(TypeError, match=re.escape(f"not {name}")):
        _ = [1, 2, 3, 4][v]


def test_default_strategy_read_var_is_identity() -> None:
    # TF: tf.distribute.get_strategy().extended.read_var(x) is array_ops.identity(x): for a
    # variable [1., 2.] after assign([3., 4.]) -> EagerTensor float32 [3.0, 4.0] (the variable,
    # and the _UnreadVariable alike); 1.5 -> float32 1.5; [1, 2] -> int32 [1, 2]; a float64
    # array -> float64; None RAISES ValueError Attempt to convert a value (None) with an
    # unsupported type (<class 'NoneType'>) to a Tensor.
    extended = ds.get_strategy().extended
    v = mwms_mpi.Variable([1.0, 2.0])
    for x in (v, v.assign([3.0, 4.0])):
        r = extended.read_var(x)
        assert type(r) is np.ndarray and r.dtype == np.float32 and r.tolist() == [3.0, 4.0]
    r = extended.read_var(v)
    r[0] = 9.0  # a fresh value: the variable is not written
    assert v.numpy().tolist() == [3.0, 4.0]
    assert extended.read_var(1.5).dtype == np.float32
    assert extended.read_var([1, 2]).dtype == np.int32
    array = np.array([1.0], np.float64)
    assert extended.read_var(array) is not array and extended.read_var(array).dtype == np.float64
    with pytest.raises(ValueError, match=re.escape("Attempt to convert a value (None)")):
        extended.read_var(None)


@pytest.mark.parametrize("shape", [(), (0,), (2,)])
def test_negative_and_absolute_value_of_a_bool_variable_are_refused(shape: Any) -> None:
    # TF: -tf.Variable(bool) RAISES InvalidArgumentError Value for attr 'T' of bool is not in
    # the list of allowed values: bfloat16, half, float, double, int8, int16, int32, int64,
    # complex64, complex128 ... [Op:Neg]; abs(v) RAISES InvalidArgumentError Value for attr 'T'
    # of bool is not in the list of allowed values: bfloat16, half, float, double, int8,
    # int16, int32, int64 ... [Op:Abs] (whatever the shape, an empty one included)
    v = mwms_mpi.Variable(np.zeros(shape, bool))
    neg = "bfloat16, half, float, double, int8, int16, int32, int64, complex64, complex128"
    with pytest.raises(errors.InvalidArgumentError, match=re.escape(f"values: {neg}")):
        _ = -v
    with pytest.raises(
        errors.InvalidArgumentError,
        match=re.escape("values: bfloat16, half, float, double, int8, int16, int32, int64"),
    ):
        abs(v)
    # TF: int32 and float32 variables negate and take abs as before
    assert (-mwms_mpi.Variable([1, -2])).tolist() == [-1, 2]
    assert abs(mwms_mpi.Variable([1.5, -2.0])).tolist() == [1.5, 2.0]


@pytest.mark.parametrize("init", [np.float32(1.5), np.int32(2)])
def test_numpy_refuses_a_scalar_sync_on_read_variable_in_cross_replica_context(
    strategy: Any, init: Any
) -> None:
    # TF (SUM, two replicas holding 1.5): np.asarray(v), np.array(v) and np.add(v, 1) RAISE
    # ValueError object __array__ method not producing an array; np.asarray(v, np.float64)
    # -> 3.0; a shape (1,) variable -> [3.0]; in replica context -> each replica's 1.5; a
    # MirroredVariable's np.asarray(v) -> 1.5
    with strategy.scope():
        v = mwms_mpi.Variable(init, synchronization=S.ON_READ, aggregation=A.SUM)
        w = mwms_mpi.Variable([init], synchronization=S.ON_READ, aggregation=A.SUM)
        m = mwms_mpi.Variable(init, aggregation=A.SUM)
    for convert in (np.asarray, np.array, lambda x: np.add(x, 1)):
        with pytest.raises(
            ValueError, match=r"^object __array__ method not producing an array: as in TF 2\.21"
        ):
            convert(v)
    assert np.asarray(v, np.float64).tolist() == 2 * float(init)
    assert np.asarray(w).tolist() == [2 * init.item()]
    assert np.asarray(m).tolist() == init.item()
    per_replica = strategy.run(lambda: np.asarray(v))
    assert [r.tolist() for r in strategy.experimental_local_results(per_replica)] == [
        init.item()
    ] * 2


def test_numpy_reads_a_scalar_sync_on_read_variable_whose_read_is_a_component(
    strategy: Any,
) -> None:
    # TF (two replicas holding 1.5): ONLY_FIRST_REPLICA np.asarray(v) -> 1.5 (the cross-replica
    # read is the first component, a variable); MEAN RAISES ValueError object __array__ method
    # not producing an array (a reduced tensor, as SUM's)
    with strategy.scope():
        first = mwms_mpi.Variable(1.5, synchronization=S.ON_READ, aggregation=A.ONLY_FIRST_REPLICA)
        mean = mwms_mpi.Variable(1.5, synchronization=S.ON_READ, aggregation=A.MEAN)
    assert np.asarray(first).tolist() == 1.5
    with pytest.raises(ValueError, match="not producing an array"):
        np.asarray(mean)


@pytest.mark.parametrize("aggregation", [A.NONE, A.SUM, A.MEAN, A.ONLY_FIRST_REPLICA])
def test_numpy_refuses_a_scalar_mirrored_variable_inside_the_scope(
    strategy: Any, aggregation: Any
) -> None:
    # TF (each aggregation): with strategy.scope(): np.asarray(v) RAISES ValueError object
    # __array__ method not producing an array (the cross-replica read is identity(v), a
    # tensor); outside the scope (the default replica context reads replica 0's variable)
    # -> 1.5; a shape (1,) variable -> [1.5] in both
    with strategy.scope():
        v = mwms_mpi.Variable(np.float32(1.5), aggregation=aggregation)
        w = mwms_mpi.Variable([np.float32(1.5)], aggregation=aggregation)
    with strategy.scope():
        with pytest.raises(ValueError, match="not producing an array"):
            np.asarray(v)
        assert np.asarray(w).tolist() == [1.5]
    assert np.asarray(v).tolist() == 1.5 and np.asarray(w).tolist() == [1.5]
