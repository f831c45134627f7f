"""``ReplicaContext.devices``, replica contexts per ``run``, and the default strategy's scope
inside a replica function or a merge function, against TF 2.21.

Every expected value is what TF 2.21.0 did when the same program ran under it (a differential
probe of ``strategy.run``/``merge_call``/contexts, run with TF's own Python in a scratch
directory: M1 and M2 are ``MirroredStrategy`` over one and two logical CPUs, the default
strategy is ``tf.distribute.get_strategy()`` outside any scope). TF is never imported here.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import mwms_mpi.distribute as ds

CPU0 = "/job:localhost/replica:0/task:0/device:CPU:0"
CPU1 = "/job:localhost/replica:0/task:0/device:CPU:1"
MIXING = r"^Mismatching tf\.distribute\.Strategy objects: .*_DefaultDistributionStrategy"


@pytest.fixture(scope="module")
def m1() -> ds.MirroredStrategy:
    return ds.MirroredStrategy(["/cpu:0"])


@pytest.fixture(scope="module")
def m2() -> ds.MirroredStrategy:
    return ds.MirroredStrategy(["/cpu:0", "/cpu:1"])


def _devices_per_replica(strategy: Any) -> dict[int, Any]:
    seen: dict[int, Any] = {}

    def fn() -> None:
        rc = ds.get_replica_context()
        seen[int(rc.replica_id_in_sync_group)] = rc.devices

    strategy.run(fn)
    return seen


# -- ReplicaContext.devices ---------------------------------------------------------------------


def test_default_replica_context_devices_is_the_current_device() -> None:
    """TF: ``(device_util.current(),)``, ``('',)`` eagerly outside any ``tf.device`` (the
    default replica context, at top level and in the default strategy's scope)."""
    rc = ds.get_replica_context()
    assert rc.devices == ("",) and type(rc.devices) is tuple
    with ds.get_strategy().scope():
        assert ds.get_replica_context().devices == ("",)


def test_default_strategy_run_devices() -> None:
    """TF: the default strategy's ``run`` context (a plain ``ReplicaContext``) answers ``('',)``."""
    assert _devices_per_replica(ds.get_strategy()) == {0: ("",)}


def test_mirrored_devices_are_a_nested_list(m1: Any, m2: Any) -> None:
    """TF's ``_MirroredReplicaContext.devices``: ``[worker_devices_by_replica[replica_id]]``, a
    list holding the replica's list of devices (also with one replica)."""
    assert _devices_per_replica(m1) == {0: [[CPU0]]}
    assert _devices_per_replica(m2) == {0: [[CPU0]], 1: [[CPU1]]}
    assert all(type(d) is list and type(d[0]) is list for d in _devices_per_replica(m2).values())


def test_devices_needs_its_own_replica_context(m2: ds.MirroredStrategy) -> None:
    """TF checks ``require_replica_context(self)`` first: outside its run the error names the
    strategies, in a merge function there is no replica context."""
    kept: list[Any] = []
    m2.run(lambda: kept.append(ds.get_replica_context()))
    with pytest.raises(RuntimeError, match=MIXING):
        _ = kept[0].devices
    seen: list[str] = []

    def merge_fn(strategy: Any) -> None:
        try:
            _ = kept[0].devices
        except RuntimeError as exc:
            seen.append(str(exc))

    m2.run(lambda: ds.get_replica_context().merge_call(merge_fn))
    assert seen == ["Need to be inside `call_for_each_replica()`"]
    top = ds.get_replica_context()
    with m2.scope(), pytest.raises(RuntimeError, match=r"^Need to be inside `call_for_each_"):
        _ = top.devices


# -- a replica context belongs to one run -------------------------------------------------------


@pytest.mark.parametrize("k", [1, 2])
def test_each_run_has_new_replica_contexts(k: int, m1: Any, m2: Any) -> None:
    """TF builds the replica contexts in each ``run``: a context kept from an earlier run is
    not the current one, and its ``merge_call`` raises "Mismatching ReplicaContext." (with one
    replica as with two); its class is ``_MirroredReplicaContext`` with one replica too."""
    strategy = m1 if k == 1 else m2
    first: list[Any] = []
    second: list[Any] = []
    strategy.run(lambda: first.append(ds.get_replica_context()))
    strategy.run(lambda: second.append(ds.get_replica_context()))
    assert len(first) == len(second) == k
    assert not any(a is b for a, b in zip(first, second, strict=True))
    assert {type(c).__name__ for c in first} == {"MirroredReplicaContext"}
    with pytest.raises(RuntimeError, match=r"^Mismatching ReplicaContext\.$"):
        strategy.run(lambda: first[0].merge_call(lambda s: 1))


# -- the default strategy's scope changes no context -------------------------------------------


def test_default_scope_in_default_run_keeps_the_replica_context() -> None:
    """TF: inside the default strategy's ``run`` its scope leaves the run's ``ReplicaContext``
    current (an int32 replica id), in replica context."""
    d = ds.get_strategy()

    def fn() -> Any:
        with d.scope():
            rc = ds.get_replica_context()
            return type(rc).__name__, rc.replica_id_in_sync_group, ds.in_cross_replica_context()

    name, rid, cross = d.run(fn)
    assert (name, cross) == ("ReplicaContext", False)
    assert type(rid) is not int and np.asarray(rid).dtype == np.int32


def test_default_scope_in_default_merge_fn_stays_cross_replica() -> None:
    """TF: in the default strategy's merge function its scope keeps the cross-replica context."""
    d = ds.get_strategy()

    def merge_fn(strategy: Any) -> Any:
        with strategy.scope():
            return ds.in_cross_replica_context(), ds.get_replica_context()

    assert d.run(lambda: ds.get_replica_context().merge_call(merge_fn)) == (True, None)


@pytest.mark.parametrize(
    "program",
    ["run_in_run", "call_for_each_replica_in_run", "run_in_scope_in_run"],
)
def test_default_run_inside_default_run_raises(program: str) -> None:
    """TF: the default strategy's ``run`` (or ``call_for_each_replica``) inside its own run
    needs cross-replica context, also with its scope entered (the scope changes nothing)."""
    d = ds.get_strategy()

    def scoped() -> Any:
        with d.scope():
            return d.run(lambda: 1)

    inner = {
        "run_in_run": lambda: d.run(lambda: 1),
        "call_for_each_replica_in_run": lambda: d.extended.call_for_each_replica(lambda: 1),
        "run_in_scope_in_run": scoped,
    }[program]
    with pytest.raises(
        RuntimeError,
        match=r"^Method requires being in cross-replica context, use get_replica_context\(\)",
    ):
        d.run(inner)


def test_other_strategy_variable_in_default_scope_in_default_run(m1: Any) -> None:
    """TF's default scope installs its creator check wherever it is entered: a variable made in
    another strategy's scope inside it raises "Mixing different", inside ``run`` too."""
    import mwms_mpi

    d = ds.get_strategy()

    def fn() -> Any:
        with d.scope(), m1.scope():
            return mwms_mpi.Variable(1.0)

    with pytest.raises(RuntimeError, match=r"^Mixing different tf\.distribute\.Strategy objects"):
        d.run(fn)


# -- get_cross_replica_context ------------------------------------------------------------------


def test_get_cross_replica_context_is_none_outside_cross_replica_context(m2: Any) -> None:
    """TF 2.21's ``distribute_lib.get_cross_replica_context()`` (no public export) is the thread
    mode's ``cross_replica_context``: ``None`` at top level and in the default strategy's scope
    (exactly one of it and ``get_replica_context()`` is ``None``); the strategy in a scope or a
    merge function, the default strategy in the default strategy's merge function."""
    d = ds.get_strategy()
    assert ds.get_cross_replica_context() is None
    with d.scope():
        assert ds.get_cross_replica_context() is None
    with m2.scope():
        assert ds.get_cross_replica_context() is m2
    seen: list[Any] = []
    m2.run(
        lambda: ds.get_replica_context().merge_call(
            lambda s: seen.append(ds.get_cross_replica_context())
        )
    )
    d.run(
        lambda: ds.get_replica_context().merge_call(
            lambda s: seen.append(ds.get_cross_replica_context())
        )
    )
    ds.get_replica_context().merge_call(lambda s: seen.append(ds.get_cross_replica_context()))
    assert seen[0] is m2 and seen[1] is d and seen[2] is d and len(seen) == 3


# -- merge_call's arguments and result ----------------------------------------------------------

_LIST = [1, {"x": 2}]


def _merge_in(where: str, strategy: Any, merge_fn: Any, **kwargs: Any) -> Any:
    """``merge_call(merge_fn, **kwargs)`` at top level (the default replica context) or in
    ``strategy.run``."""
    if where == "top":
        return ds.get_replica_context().merge_call(merge_fn, **kwargs)
    return strategy.run(lambda: ds.get_replica_context().merge_call(merge_fn, **kwargs))


def test_default_merge_call_returns_merge_fn_result_itself() -> None:
    """TF's ``ReplicaContext._merge_call`` (the default strategy's, one replica) returns what
    ``merge_fn`` returned, unselected: the same list, and a dict ``nest`` could not sort."""
    d = ds.get_strategy()
    for where in ("top", "run"):
        assert _merge_in(where, d, lambda s: _LIST) is _LIST
        assert _merge_in(where, d, lambda s: {1: "a", "b": 2}) == {1: "a", "b": 2}


def test_mirrored_merge_call_selects_the_replica_value(m1: Any) -> None:
    """TF's ``_MirroredReplicaContext`` hands each replica ``select_replica(i, result)`` (a
    ``nest.map_structure``), with one replica too: a new list, and ``nest``'s sort of a dict's
    keys fails on mixed keys."""
    assert _merge_in("run", m1, lambda s: _LIST) == _LIST
    assert _merge_in("run", m1, lambda s: _LIST) is not _LIST
    with pytest.raises(TypeError, match=r"^'<' not supported between instances of 'str' and 'int'"):
        _merge_in("run", m1, lambda s: {1: "a", "b": 2})


@pytest.mark.parametrize("where", ["top", "default_run", "m1", "m2"])
def test_merge_call_kwargs_must_be_a_mapping(where: str, m1: Any, m2: Any) -> None:
    """TF only replaces ``kwargs=None`` by ``{}``: an empty list or tuple reaches
    ``merge_fn(strategy, *args, **kwargs)`` and Python refuses it."""
    strategy = {"top": None, "default_run": ds.get_strategy(), "m1": m1, "m2": m2}[where]
    for empty, kind in (([], "list"), ((), "tuple")):
        with pytest.raises(TypeError, match=rf"argument after \*\* must be a mapping, not {kind}$"):
            _merge_in("top" if strategy is None else "run", strategy, lambda s: 1, kwargs=empty)


def test_merge_call_args_are_unpacked_as_given(m1: Any, m2: Any) -> None:
    """TF unpacks ``args`` itself (``*args``): a non-iterable raises Python's own message; a
    generator works with one replica, and with two its per-replica generators regroup into a
    ``PerReplica``, which ``*`` refuses."""
    with pytest.raises(TypeError, match=r"^Value after \* must be an iterable, not int$"):
        _merge_in("top", None, lambda s, *a: a, args=3)
    assert _merge_in("run", m1, lambda s, *a: a, args=(x for x in [1, 2])) == (1, 2)

    def each_replica_its_generator() -> Any:
        return ds.get_replica_context().merge_call(lambda s, *a: a, args=(x for x in [1, 2]))

    with pytest.raises(TypeError, match=r"^Value after \* must be an iterable, not PerReplica$"):
        m2.run(each_replica_its_generator)


@pytest.mark.parametrize("empty", [[], (), "", 0], ids=["list", "tuple", "str", "int"])
@pytest.mark.parametrize("where", ["default", "m1", "m2"])
def test_run_kwargs_must_be_a_mapping(where: str, empty: Any, m1: Any, m2: Any) -> None:
    """TF's ``call_for_each_replica`` only replaces ``kwargs=None`` by ``{}``: any other empty
    value reaches ``fn(*args, **kwargs)`` (by ``run`` or ``extended.call_for_each_replica``)."""
    strategy = {"default": ds.get_strategy(), "m1": m1, "m2": m2}[where]
    kind = type(empty).__name__
    with pytest.raises(TypeError, match=rf"argument after \*\* must be a mapping, not {kind}$"):
        strategy.run(lambda: 1, kwargs=empty)
    with strategy.scope(), pytest.raises(TypeError, match="must be a mapping"):
        strategy.extended.call_for_each_replica(lambda: 1, kwargs=empty)
