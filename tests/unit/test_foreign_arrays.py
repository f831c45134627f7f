"""Arrays from other libraries (JAX, a minimal ``__array__`` stand-in) through every API, loss
helpers inside ``jax.grad``, variables handed to libraries, and the ``jax.jit`` guard.

Each API is run twice, on a numpy value and on the same value wrapped by another library, and
the two results must be equal numpy arrays of the same dtype (the numpy run is the reference).
TF 2.21's ``__array__`` behaviour is recorded as literals (measured with /work/tfvenv:
``np.asarray(tf.Variable([1.5, 2.5]))`` is a writeable float32 copy that later updates do not
change; ``dtype=np.int32`` casts to ``[1, 2]``; ``np.asarray(v, copy=False)`` raises numpy's
``ValueError: Unable to avoid copy``).
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import mwms_mpi
import mwms_mpi.distribute as ds
from mwms_mpi import nn, optimizers
from mwms_mpi.types import ReduceOp, VariableAggregation, VariableSynchronization
from mwms_mpi.values.convert import as_array, convert_to_dtype, is_tensor

jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")

JIT_FIX = "jit only the pure loss-and-gradient function"


class OnlyArray:
    """A minimal foreign array: nothing but ``__array__`` (as the array protocol's minimum)."""

    def __init__(self, value: Any) -> None:
        self._value = np.array(value)

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        return self._value if dtype is None else self._value.astype(dtype)


WRAPS: dict[str, Callable[[Any], Any]] = {"jax": jnp.asarray, "only_array": OnlyArray}


def _strategy(k: int) -> Any:
    return ds.MirroredStrategy([f"/cpu:{i}" for i in range(k)])


def _replica_grad(wrap: Callable[[Any], Any]) -> Any:
    """A per-replica gradient that differs by replica (1, 2 | 2, 4), wrapped by ``wrap``."""
    rid = ds.get_replica_context().replica_id_in_sync_group
    return wrap(np.array([1.0, 2.0], np.float32) * np.float32(rid + 1))


def _local(value: Any) -> list[np.ndarray]:
    if isinstance(value, ds.DistributedValues):
        return [np.asarray(v) for v in value.values]
    return [value]


def _same(ours: Any, reference: Any) -> None:
    for a, b in zip(_local(ours), _local(reference), strict=True):
        assert type(a) is np.ndarray, type(a)
        assert a.dtype == b.dtype
        np.testing.assert_array_equal(a, b)


# -- the conversion home ---------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.bool_])
@pytest.mark.parametrize("wrap", sorted(WRAPS))
def test_as_array_takes_foreign_arrays_as_numpy_of_their_dtype(wrap: str, dtype: Any) -> None:
    reference = np.array([[0, 1], [2, 3]], dtype=dtype)
    converted = as_array(WRAPS[wrap](reference))
    assert type(converted) is np.ndarray
    assert converted.dtype == reference.dtype
    np.testing.assert_array_equal(converted, reference)
    assert is_tensor(WRAPS[wrap](reference))
    cast = convert_to_dtype(WRAPS[wrap](reference), np.float64)
    assert cast.dtype == np.float64 and type(cast) is np.ndarray


def test_as_array_of_a_jax_array_is_a_zero_copy_view() -> None:
    x = jnp.arange(1024.0)
    converted = as_array(x)
    assert not converted.flags.owndata  # a view of JAX's buffer, not a copy
    assert not converted.flags.writeable  # JAX arrays are immutable: nobody can write it


class OnlyDlpack:
    """A foreign array with nothing but DLPack (host memory, as numpy exports it)."""

    def __init__(self, value: Any, device: tuple[int, int] = (1, 0)) -> None:
        self._value, self._device = np.array(value), device

    def __dlpack__(self, **kwargs: Any) -> Any:
        return self._value.__dlpack__(**kwargs)

    def __dlpack_device__(self) -> tuple[int, int]:
        return self._device


def test_as_array_takes_a_dlpack_only_host_array() -> None:
    reference = np.array([[1, 2], [3, 4]], np.int64)
    converted = as_array(OnlyDlpack(reference))
    assert type(converted) is np.ndarray and converted.dtype == np.int64
    np.testing.assert_array_equal(converted, reference)


def test_a_gpu_dlpack_array_without_cupy_names_the_fix() -> None:
    assert "cupy" not in sys.modules  # CuPy is not installed here: no device array can exist
    with pytest.raises(ValueError, match="import cupy first"):
        as_array(OnlyDlpack(np.ones(2), device=(2, 0)))  # kDLCUDA


class GpuWithHostCopy(OnlyDlpack):
    """A device array whose library can also copy it to the host (as a JAX GPU array)."""

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        return self._value.copy()


def test_a_gpu_array_without_cupy_goes_through_its_host_copy() -> None:
    assert "cupy" not in sys.modules
    converted = as_array(GpuWithHostCopy(np.arange(3.0), device=(2, 0)))
    assert type(converted) is np.ndarray
    np.testing.assert_array_equal(converted, [0.0, 1.0, 2.0])


def test_python_values_keep_tf_constant_rules() -> None:
    assert as_array(1.5).dtype == np.float32
    assert as_array(3).dtype == np.int32
    assert as_array([1.0, 2.0]).dtype == np.float32


def test_other_objects_are_still_refused_with_tf_message() -> None:
    with pytest.raises(ValueError, match="Attempt to convert a value"):
        as_array(object())


def test_converting_a_foreign_array_does_not_import_jax() -> None:
    code = (
        "import sys, numpy as np\n"
        "from mwms_mpi.values.convert import as_array\n"
        "class A:\n"
        "    def __array__(self, dtype=None, copy=None): return np.ones(2)\n"
        "assert as_array(A()).sum() == 2\n"
        "assert 'jax' not in sys.modules, 'jax imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


# -- every API that takes values ----------------------------------------------------------


def _scenarios(st: Any, wrap: Callable[[Any], Any]) -> dict[str, Callable[[], Any]]:
    g = np.array([1.0, 2.0], np.float32)
    ctx = ds.get_replica_context

    def variable_ops() -> list[Any]:
        with st.scope():
            v = mwms_mpi.Variable(wrap(g))
        out = [v.numpy()]
        for op in ("assign", "assign_add", "assign_sub"):
            getattr(v, op)(wrap(g * 3), read_value=False)
            out.append(v.numpy())
        return out

    def apply_gradients() -> Any:
        with st.scope():
            v = mwms_mpi.Variable(np.zeros(2, np.float32))
            opt = optimizers.SGD(0.5)
        st.run(lambda: opt.apply_gradients([(_replica_grad(wrap), v)]))
        return v.numpy()

    def with_var(fn: Callable[[Any], Any]) -> Any:
        with st.scope():
            v = mwms_mpi.Variable(np.zeros(2, np.float32))
        return fn(v)

    per_replica = lambda: st.run(lambda: _replica_grad(wrap))  # noqa: E731
    return {
        "variable_ops": variable_ops,
        "apply_gradients": apply_gradients,
        "reduce_to": lambda: with_var(
            lambda v: st.extended.reduce_to(ReduceOp.SUM, per_replica(), v)
        ),
        "batch_reduce_to": lambda: with_var(
            lambda v: st.extended.batch_reduce_to(
                ReduceOp.MEAN, [(per_replica(), v), (per_replica(), v)]
            )
        ),
        "all_reduce": lambda: st.run(
            lambda: ctx().all_reduce(ReduceOp.SUM, {"a": _replica_grad(wrap)})["a"]
        ),
        "all_gather": lambda: st.run(lambda: ctx().all_gather(_replica_grad(wrap), axis=0)),
        "reduce_to_plain": lambda: with_var(
            lambda v: st.extended.reduce_to(ReduceOp.MEAN, wrap(g), v)
        ),
        "reduce": lambda: st.reduce(ReduceOp.SUM, per_replica(), axis=None),
        "reduce_axis": lambda: st.reduce(ReduceOp.MEAN, per_replica(), axis=0),
        "gather": lambda: st.gather(per_replica(), axis=0),
    }


SCENARIOS = sorted(_scenarios(None, np.asarray))

# Every API with each wrapper at k = 1 and 2 (a non-distributed value handed back by
# reduce_to/gather went around values/convert.py until distribute/ converted it too).
API_CASES = [
    pytest.param(scenario, wrap, k, id=f"{scenario}-{wrap}-k{k}")
    for scenario in SCENARIOS
    for wrap in sorted(WRAPS)
    for k in (1, 2)
]


@pytest.mark.parametrize(("scenario", "wrap", "k"), API_CASES)
def test_api_takes_foreign_arrays_like_numpy(scenario: str, wrap: str, k: int) -> None:
    st = _strategy(k)
    reference = _scenarios(st, np.asarray)[scenario]()
    ours = _scenarios(st, WRAPS[wrap])[scenario]()
    if isinstance(reference, list):
        for a, b in zip(ours, reference, strict=True):
            _same(a, b)
    else:
        _same(ours, reference)


def test_replicas_wrapping_one_buffer_pass_distinct_values() -> None:
    """Each replica's wrapper is its own value (TF converts each to its own tensor), even when
    ``__array__`` hands back the same numpy array: the conversion must not make them one
    object, which the merge would take for a single non-distributed value."""
    st = _strategy(2)
    shared = np.array([1.0, 2.0], np.float32)
    ctx = ds.get_replica_context
    wrapped = [OnlyArray(shared), OnlyArray(shared)]
    for w in wrapped:
        w._value = shared  # both wrappers hand back the very same array
    out = st.run(lambda: ctx().all_reduce(ReduceOp.SUM, wrapped[ctx().replica_id_in_sync_group]))
    for value in _local(out):
        np.testing.assert_array_equal(value, [2.0, 4.0])


# -- JAX tracers: a clear error where values enter ---------------------------------------


@pytest.mark.parametrize("k", [1, 2], ids=["k1", "k2"])
def test_mwms_calls_under_jit_name_the_fix(k: int) -> None:
    st = _strategy(k)
    with st.scope():
        v = mwms_mpi.Variable(np.zeros(2, np.float32))
        opt = optimizers.SGD(0.5)
    # (the call, what its message names besides the fix: "" where the first guard to fire
    # depends on the API's internals, e.g. whether the optimizer reads the variable first)
    calls: list[tuple[Callable[[Any], Any], str]] = [
        (lambda x: opt.apply_gradients([(x, v)]), ""),
        (lambda x: v.assign(x), ""),
        (lambda x: mwms_mpi.Variable(x), ""),
        (lambda x: x + v.read_value(), "Variable.read_value"),
        (lambda x: x + v.value(), "Variable.value"),
        (lambda x: x + np.asarray(v), "np.asarray(variable)"),
        (lambda x: x + jnp.asarray(v), "jnp.asarray(variable)"),
        (lambda x: x + v.read_only_value(), "Variable.read_only_value"),
        (lambda x: v * x, ""),
        (lambda x: x * v, ""),
    ]
    if k == 1:  # at k = 2 TF's "non-DistributedValues ... SUM" error comes first (reported)
        calls.append((lambda x: st.reduce(ReduceOp.SUM, x, axis=None), "it is a JAX tracer"))
    for call, names in calls:
        with st.scope(), pytest.raises(ValueError, match=JIT_FIX) as raised:
            jax.jit(call)(jnp.ones(2, jnp.float32))
        assert names in str(raised.value)


def test_arithmetic_of_a_plain_variable_with_a_tracer_names_the_fix() -> None:
    v = mwms_mpi.Variable(np.array([2.0, 3.0], np.float32))
    for call in (lambda x: v * x, lambda x: x - v, lambda x: v + x):
        with pytest.raises(ValueError, match="it is a JAX tracer") as raised:
            jax.jit(call)(jnp.ones(2, jnp.float32))
        assert JIT_FIX in str(raised.value)


def test_reading_a_variable_under_grad_without_jit_is_allowed() -> None:
    v = mwms_mpi.Variable(np.array([2.0, 3.0], np.float32))
    grad = jax.grad(lambda x: jnp.sum(x * jnp.asarray(v)))(jnp.ones(2, jnp.float32))
    np.testing.assert_array_equal(np.asarray(grad), [2.0, 3.0])


# -- loss helpers inside autodiff ----------------------------------------------------------


def test_compute_average_loss_is_differentiable_by_jax() -> None:
    x = jnp.array([1.0, 2.0, 3.0], jnp.float32)
    w = np.array([1.0, 0.5, 2.0], np.float32)

    def loss(x: Any) -> Any:
        return nn.compute_average_loss(x**2, sample_weight=w, global_batch_size=8)

    value, grad = jax.value_and_grad(loss)(x)
    np.testing.assert_allclose(np.asarray(value), (1 + 0.5 * 4 + 2 * 9) / 8, rtol=1e-6)
    np.testing.assert_allclose(np.asarray(grad), 2 * np.asarray(x) * w / 8, rtol=1e-6)
    jitted = jax.jit(jax.grad(loss))(x)  # the pure loss function may be jitted too
    np.testing.assert_allclose(np.asarray(jitted), np.asarray(grad), rtol=1e-6)


@pytest.mark.parametrize("k", [1, 2], ids=["k1", "k2"])
def test_compute_average_loss_default_batch_under_grad_in_a_replica(k: int) -> None:
    st = _strategy(k)

    def replica_fn() -> Any:
        x = jnp.array([1.0, 2.0], jnp.float32)
        return np.asarray(jax.grad(lambda x: nn.compute_average_loss(x * x))(x))

    for grad in _local(st.run(replica_fn)):
        np.testing.assert_allclose(grad, np.array([2.0, 4.0]) / (2 * k), rtol=1e-6)


def test_scale_regularization_loss_is_differentiable_by_jax() -> None:
    st = _strategy(2)
    grads = st.run(
        lambda: np.asarray(
            jax.grad(lambda x: nn.scale_regularization_loss(jnp.sum(x**3)))(
                jnp.array([1.0, 2.0], jnp.float32)
            )
        )
    )
    for grad in _local(grads):
        np.testing.assert_allclose(grad, np.array([3.0, 12.0]) / 2, rtol=1e-6)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
def test_compute_average_loss_numpy_path_is_unchanged_bitwise(dtype: Any) -> None:
    rng = np.random.default_rng(3)
    losses = rng.standard_normal(7).astype(dtype)
    weights = rng.standard_normal(7).astype(np.float32)
    got = nn.compute_average_loss(losses, sample_weight=weights, global_batch_size=11)
    scaled = np.multiply(losses.astype(np.float32), weights).astype(dtype)
    expected = np.true_divide(np.sum(scaled, dtype=dtype), np.asarray(11).astype(dtype))
    assert type(got) is np.ndarray and got.dtype == dtype
    assert got.tobytes() == np.asarray(expected, dtype=dtype).tobytes()


@pytest.mark.parametrize("wrap", sorted(WRAPS))
def test_compute_average_loss_of_foreign_arrays_matches_numpy(wrap: str) -> None:
    losses = np.array([0.25, 1.5, 3.0], np.float32)
    weights = np.array([[1.0], [0.0], [2.0]], np.float32)
    reference = nn.compute_average_loss(losses, sample_weight=weights, global_batch_size=4)
    ours = nn.compute_average_loss(
        WRAPS[wrap](losses), sample_weight=WRAPS[wrap](weights), global_batch_size=4
    )
    assert np.asarray(ours).dtype == reference.dtype
    assert np.asarray(ours).tobytes() == reference.tobytes()


# -- variables handed to libraries --------------------------------------------------------


def test_np_asarray_of_a_variable_is_tfs_fresh_copy() -> None:
    v = mwms_mpi.Variable([1.5, 2.5])
    held = np.asarray(v)
    assert held.dtype == np.float32 and held.flags.writeable
    v.assign_add([1.0, 1.0])
    np.testing.assert_array_equal(held, [1.5, 2.5])  # TF: later updates do not change it
    held[0] = 100.0
    np.testing.assert_array_equal(v.numpy(), [2.5, 3.5])  # nor does writing it change v
    np.testing.assert_array_equal(np.asarray(v, dtype=np.int32), [2, 3])
    assert v.__array__(np.int32).dtype == np.int32
    assert np.asarray(v, dtype=np.float64).dtype == np.float64
    with pytest.raises(ValueError, match="Unable to avoid copy"):
        np.asarray(v, copy=False)
    np.testing.assert_array_equal(np.asarray(jnp.asarray(v)), [2.5, 3.5])


def test_np_asarray_of_distributed_variables_in_each_context() -> None:
    st = _strategy(2)
    with st.scope():
        m = mwms_mpi.Variable([1.0, 2.0])
        so = mwms_mpi.Variable(
            [1.0, 2.0],
            synchronization=VariableSynchronization.ON_READ,
            aggregation=VariableAggregation.SUM,
        )
    np.testing.assert_array_equal(np.asarray(m), [1.0, 2.0])
    np.testing.assert_array_equal(np.asarray(so), [2.0, 4.0])  # TF: the SUM across replicas
    assert np.asarray(m, dtype=np.float64).dtype == np.float64

    def fn() -> Any:
        rid = ds.get_replica_context().replica_id_in_sync_group
        so.assign([rid + 1.0] * 2)
        return np.asarray(so), np.asarray(jnp.asarray(m)), so.read_only_value()

    local, mirrored, view = st.run(fn)
    np.testing.assert_array_equal(np.stack(local.values), [[1.0, 1.0], [2.0, 2.0]])
    np.testing.assert_array_equal(np.stack(mirrored.values), [[1.0, 2.0], [1.0, 2.0]])
    np.testing.assert_array_equal(np.stack(view.values), [[1.0, 1.0], [2.0, 2.0]])
    np.testing.assert_array_equal(np.asarray(so), [3.0, 3.0])
    cross = so.read_only_value()
    assert not cross.flags.writeable
    np.testing.assert_array_equal(cross, [3.0, 3.0])


@pytest.mark.parametrize("k", [1, 2], ids=["k1", "k2"])
def test_read_only_value_does_not_copy_and_stays_a_value(k: int) -> None:
    st = _strategy(k)
    with st.scope():
        v = mwms_mpi.Variable(np.arange(4, dtype=np.float32))
    first, again = v.read_only_value(), v.read_only_value()
    assert np.shares_memory(first, again)  # no copy: both are the variable's storage
    assert not first.flags.writeable
    with pytest.raises(ValueError):
        first.flags.writeable = True
    with pytest.raises(ValueError):
        first[0] = 7.0
    v.assign_add(np.ones(4, np.float32))  # copy-on-write: the held value keeps its value
    np.testing.assert_array_equal(first, [0.0, 1.0, 2.0, 3.0])
    np.testing.assert_array_equal(v.numpy(), [1.0, 2.0, 3.0, 4.0])
    second = v.read_only_value()
    v.assign_sub(np.ones(4, np.float32))
    v.assign([9.0, 9.0, 9.0, 9.0])
    np.testing.assert_array_equal(second, [1.0, 2.0, 3.0, 4.0])
    third = v.read_only_value()
    with st.scope():
        opt = optimizers.SGD(1.0)
    st.run(lambda: opt.apply_gradients([(np.ones(4, np.float32), v)]))
    np.testing.assert_array_equal(third, [9.0, 9.0, 9.0, 9.0])
    np.testing.assert_array_equal(v.numpy(), [9.0 - k] * 4)
    fresh = v.read_value()  # TF's read: still a writeable copy
    assert fresh.flags.writeable and not np.shares_memory(fresh, v.read_only_value())
