"""TF rules that had two or more copies in the package, pinned once against TF 2.21 (issue 25).

Each rule now has one home and every caller goes through it; these tests pin the rule through
each public door that used a copy, with the odd cases where the copies had drifted apart. The
expected values were printed by TF 2.21 (``tensorflow-cpu==2.21.0``, MirroredStrategy on two
logical CPUs); the TF source lines cited are from that wheel's ``tensorflow/python/distribute``.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

import mwms_mpi as mm
import mwms_mpi.distribute as ds
from mwms_mpi import _arrays, _context
from mwms_mpi.collective import deterministic
from mwms_mpi.distribute import cross_device_utils
from mwms_mpi.distribute.cluster_resolver import MPIClusterResolver
from mwms_mpi.values import PerReplica, value_container

_HOST_OR_DEVICES = "Inputs to batch_reduce_to must be either all on the host or all on the compute"
_FOREIGN = ">" if sys.byteorder == "little" else "<"


@pytest.fixture(scope="module")
def ms2() -> ds.MirroredStrategy:
    return ds.MirroredStrategy(["/cpu:0", "/cpu:1"])


@pytest.fixture(scope="module")
def mwms2() -> Iterator[ds.MultiWorkerMirroredStrategy]:
    """One worker (this process) with two CPU replicas: what tells host values from replicas'."""
    resolver = MPIClusterResolver(num_accelerators={"CPU": 2})
    yield ds.MultiWorkerMirroredStrategy(cluster_resolver=resolver)


@pytest.fixture(scope="module")
def mirrored_var(ms2: ds.MirroredStrategy) -> Any:
    with ms2.scope():
        return mm.Variable(1.0)


class _DeadContainer:
    """A component whose distributed variable is gone: its weak reference answers ``None``."""

    def _distributed_container(self) -> None:
        return None


# -- value_container: distribute_utils.py:224-248, used by mirrored_strategy.py:881-882 ----------


def test_value_container_of_a_component_is_its_variable(ms2: Any, mirrored_var: Any) -> None:
    component = mirrored_var.values[0]
    # TF: s.extended.value_container(v.values[0]) is v; value_container(v) is v
    assert ms2.extended.value_container(component) is mirrored_var
    assert value_container(component) is mirrored_var
    assert ms2.extended.value_container(mirrored_var) is mirrored_var
    assert value_container(mirrored_var) is mirrored_var


@pytest.mark.parametrize("value", [None, 3, "x"], ids=["None", "int", "str"])
def test_value_container_of_a_plain_value_is_the_value(ms2: Any, value: Any) -> None:
    # TF: no _distributed_container attribute: the value itself (None gives None)
    assert ms2.extended.value_container(value) is value
    assert value_container(value) is value


def test_value_container_of_a_dead_container_is_the_value(ms2: Any) -> None:
    """TF returns the value when the container is gone (``container if container is not None
    else val``, distribute_utils.py:248). ``values.value_container`` did; the extended's own
    copy returned ``None``."""
    component = _DeadContainer()
    assert value_container(component) is component
    assert ms2.extended.value_container(component) is component  # TF: True


# -- _local_results: distribute_lib.py:3013-3032 (StrategyExtendedV2._local_results) -----------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, (None,)),
        ([1, 2], ([1, 2], [1, 2])),
        ({}, ({}, {})),
        ((), ((), ())),
        (PerReplica((np.float32(0), np.float32(1))), (np.float32(0), np.float32(1))),
        (
            (PerReplica((np.float32(0), np.float32(1))), 5),
            ((np.float32(0), 5), (np.float32(1), 5)),
        ),
        ({"a": PerReplica((0, 1))}, ({"a": 0}, {"a": 1})),
    ],
    ids=["None", "list", "empty-dict", "empty-tuple", "per-replica", "tuple", "dict"],
)
def test_local_results_as_tf(ms2: Any, value: Any, expected: tuple[Any, ...]) -> None:
    got = ms2.experimental_local_results(value)
    assert type(got) is tuple and len(got) == len(expected)
    for g, e in zip(got, expected, strict=True):
        assert type(g) is type(e) and g == e


def test_local_results_of_an_array_is_the_array(ms2: Any, mwms2: Any) -> None:
    a = np.arange(3.0)
    for strategy in (ms2, mwms2, ds.get_strategy()):
        got = strategy.experimental_local_results(a)
        assert len(got) == 1 and got[0] is a  # TF: (a,), the object itself


def test_local_results_of_a_variable_are_its_components(ms2: Any, mirrored_var: Any) -> None:
    c0, c1 = mirrored_var.values
    got = ms2.experimental_local_results(mirrored_var)
    assert len(got) == 2 and got[0] is c0 and got[1] is c1  # TF: True True


def test_local_results_select_a_nested_variables_components(ms2: Any, mirrored_var: Any) -> None:
    """TF's ``get_values`` indexes every ``DistributedValues``, variables included
    (distribute_lib.py:3021-3024), unlike ``select_replica`` (which keeps variables whole):
    TF gives ``([c0, 3], [c1, 3])`` for ``[v, 3]``; the copy built on ``select_replica`` gave
    ``([v, 3], [v, 3])``."""
    c0, c1 = mirrored_var.values
    got = ms2.experimental_local_results([mirrored_var, 3])
    assert len(got) == 2
    assert got[0][0] is c0 and got[1][0] is c1  # TF: True True
    assert got[0][1] == 3 and got[1][1] == 3


def test_default_strategy_local_results_are_one_value() -> None:
    # TF: distribute_lib.py:4090-4091, the default strategy's own rule: (value,), never indexed
    default = ds.get_strategy()
    assert default.experimental_local_results([1, 2]) == ([1, 2],)
    assert default.experimental_local_results(None) == (None,)


# -- "all on the host": mirrored_strategy.py:791-798 with each strategy's _get_cross_device_ops --


def _per_replica(strategy: Any, dtype: Any) -> Any:
    return strategy.experimental_distribute_values_from_function(lambda _: np.ones(1, dtype=dtype))


def test_mirrored_batch_reduce_of_int32_needs_one_op(ms2: Any) -> None:
    """MirroredExtended's rule: int32 values reduce with a fresh ``ReductionToOneDevice`` each,
    so an int32 value next to anything raises (TF: ``f,i`` and ``i,i`` raise, ``f,f`` sums)."""
    f, i = _per_replica(ms2, np.float32), _per_replica(ms2, np.int32)
    with ms2.scope():
        for pairs in ([(f, f), (i, i)], [(i, i), (i, i)]):
            with pytest.raises(ValueError, match=_HOST_OR_DEVICES):
                ms2.extended.batch_reduce_to("SUM", pairs)
        out = ms2.extended.batch_reduce_to("SUM", [(f, f), (f, f)])
    assert [[r.tolist() for r in ms2.experimental_local_results(o)] for o in out] == [
        [[2.0], [2.0]],
        [[2.0], [2.0]],
    ]
    with ms2.scope():
        (single,) = ms2.extended.batch_reduce_to("SUM", [(i, i)])
    assert [r.tolist() for r in ms2.experimental_local_results(single)] == [[2], [2]]


def test_multi_worker_batch_reduce_of_host_and_replica_values_raises(mwms2: Any) -> None:
    """CollectiveAllReduceExtended's ``_get_cross_device_ops`` (collective_all_reduce_strategy.py
    :909-923): one value per replica is on the devices, one value per worker on the host."""
    per_replica = _per_replica(mwms2, np.float32)
    host = np.ones(1, np.float32)
    with mwms2.scope():
        for pairs in (
            [(per_replica, per_replica), (host, host)],
            [(host, host), (per_replica,) * 2],
        ):
            with pytest.raises(ValueError, match=_HOST_OR_DEVICES):
                mwms2.extended.batch_reduce_to("SUM", pairs)
        on_host = mwms2.extended.batch_reduce_to("SUM", [(host, host), (host, host)])
        on_devices = mwms2.extended.batch_reduce_to("SUM", [(per_replica, per_replica)])
    assert [np.asarray(v).tolist() for v in on_host] == [[1.0], [1.0]]
    assert [r.tolist() for r in mwms2.experimental_local_results(on_devices[0])] == [[2.0], [2.0]]


@pytest.mark.parametrize("which", ["mirrored", "multi-worker"])
def test_an_empty_batch_reduce_is_empty(ms2: Any, mwms2: Any, which: str) -> None:
    """A deliberate difference: TF raises ``AttributeError: 'NoneType' object has no attribute
    'batch_reduce'`` for ``[]``; here it is ``[]`` (agreed on every worker first:
    tests/mpi/test_strategy_agreement.py)."""
    strategy = ms2 if which == "mirrored" else mwms2
    with strategy.scope():
        assert strategy.extended.batch_reduce_to("SUM", []) == []


# -- byte order: one home, _arrays.native_dtype / native_array --------------------------------


@pytest.mark.parametrize("name", ["f2", "f4", "f8", "i2", "i4", "i8", "u8", "c8", "c16"])
def test_native_dtype_swaps_only_a_foreign_order(name: str) -> None:
    native = np.dtype("=" + name)
    foreign = np.dtype(_FOREIGN + name)
    assert _arrays.native_dtype(native) is native  # already native: the same object
    got = _arrays.native_dtype(foreign)
    assert got == native and got.isnative and got.byteorder in "=|<>"
    assert _arrays.native_dtype(_FOREIGN + name) == native  # a dtype-like is accepted
    assert _arrays.native_dtype(np.float32) == np.dtype(np.float32)


@pytest.mark.parametrize("name", ["b1", "i1", "u1"])
def test_native_dtype_of_a_one_byte_type_is_itself(name: str) -> None:
    d = np.dtype(name)
    assert _arrays.native_dtype(d) is d and d.byteorder == "|"


def test_native_array_copies_only_a_foreign_order() -> None:
    a = np.arange(6, dtype=np.float64).reshape(2, 3)
    assert _arrays.native_array(a) is a
    swapped = a.astype(a.dtype.newbyteorder(_FOREIGN))
    got = _arrays.native_array(swapped)
    assert got.dtype.isnative and got.dtype == np.float64 and got.shape == (2, 3)
    np.testing.assert_array_equal(got, a)


def test_the_collective_dtype_checks_take_a_foreign_order() -> None:
    # TF's kernels see no byte order: '>f4' is float32 to them, '>i2' is int16 (refused)
    cross_device_utils.check_collective_reduce_dtype(np.dtype(_FOREIGN + "f4"))
    cross_device_utils.check_collective_gather_dtype(np.dtype(_FOREIGN + "i8"))
    with pytest.raises(mm.errors.InvalidArgumentError, match="int16"):
        cross_device_utils.check_collective_reduce_dtype(np.dtype(_FOREIGN + "i2"))
    with pytest.raises(TypeError, match="int16"):
        cross_device_utils.check_collective_gather_dtype(np.dtype(_FOREIGN + "i2"))


def test_an_exact_sum_of_foreign_order_addends_is_native() -> None:
    addends = [np.array([0.1, 1e20, -1e20], np.float64), np.array([0.2, 3.0, 0.0], np.float64)]
    expected = deterministic.local_exact_sum(addends)
    swapped = [a.astype(a.dtype.newbyteorder(_FOREIGN)) for a in addends]
    got = deterministic.local_exact_sum(swapped)
    assert got.dtype.isnative and got.dtype == np.float64
    np.testing.assert_array_equal(got, expected)


# -- "not the default replica context": distribute_lib.py:2999-3001, input_lib.py:319 ----------


def test_in_a_replica_function_outside_any_strategy_is_false() -> None:
    # TF: get_replica_context() is the default replica context (_DefaultReplicaContext)
    assert _context.in_replica_function() is False


def test_in_a_replica_function_in_a_scope_is_false(ms2: Any) -> None:
    with ms2.scope():
        assert _context.in_replica_function() is False  # TF: get_replica_context() is None


def test_in_a_replica_function_in_run_is_true(ms2: Any) -> None:
    seen: list[bool] = []
    ms2.run(lambda: seen.append(_context.in_replica_function()))
    assert seen == [True, True]


def test_in_a_replica_function_in_the_default_strategys_run_is_true() -> None:
    # TF: default_strategy.run(fn) enters a new _DefaultReplicaContext, not the default one
    # (`d.run(lambda: get_replica_context()) is get_replica_context()` printed False)
    assert ds.get_strategy().run(_context.in_replica_function) is True


def test_in_a_replica_function_in_a_merge_call_is_false(ms2: Any) -> None:
    def replica_fn() -> bool:
        ctx = ds.get_replica_context()
        assert ctx is not None
        seen.append(ctx.merge_call(lambda _: _context.in_replica_function()))
        return True

    seen: list[bool] = []
    ms2.run(replica_fn)
    assert seen == [False, False]


def test_update_outside_any_strategy_updates_every_component(ms2: Any) -> None:
    """``extended.update`` in the default replica context runs ``_update`` in the strategy's
    scope (distribute_lib.py:2999-3004). TF: with ``group=False`` a tuple, the variable 2.0."""
    with ms2.scope():
        v = mm.Variable(1.0)
    out = ms2.extended.update(v, lambda c, x: c.assign_add(x), args=(1.0,), group=False)
    assert type(out) is tuple and len(out) == 2
    assert [float(np.asarray(c.read_value())) for c in v.values] == [2.0, 2.0]
