"""Behaviours of TF 2.21's MultiWorkerMirroredStrategy that mwms_mpi once differed from (issue
24), at this world size with k = 1 and k = 2 local replicas, worker by worker.

TF's outcomes are pinned in ``tf_known_differences_pins.json`` beside this file, per
``n{workers}_k{replicas}`` and per task: real TF 2.21.0 workers on a loopback ``TF_CONFIG`` (two
logical CPUs per worker, as ``tests/support/differential.py`` makes them), recorded by the
scratch programs ``/work/tfscratch/known_diffs/probe_mw.py`` (run as ``probe_mw.py N K``) and
``make_pins.py``. Each rank compares its own outcomes with its worker's; the ranks agree on
pass/fail before asserting. The default strategy and MirroredStrategy side is
``tests/unit/test_tf_known_differences.py``.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import mwms_mpi.distribute as ds
from mwms_mpi import data, errors
from mwms_mpi.values import Mirrored, MirroredVariable, Variable
from tests.support.mpi import all_ranks_ok, rank_size

pytestmark = pytest.mark.mpi

_PINS = os.path.join(os.path.dirname(__file__), "tf_known_differences_pins.json")


def _pins(strategy: Any) -> dict[str, Any]:
    """TF's outcomes for this rank's worker at this world size and k."""
    rank, size = rank_size()
    k = len(strategy.extended.worker_devices)
    with open(_PINS, encoding="utf-8") as f:
        everything = json.load(f)
    config = f"n{size}_k{k}"
    if config not in everything:  # the same on every rank: it depends on the world size only
        pytest.skip(f"TF 2.21 was run at {', '.join(sorted(everything))} only, not {config}")
    found: dict[str, Any] = everything[config][rank]
    return found


@pytest.fixture
def tf_ran_here(strategy: Any) -> None:
    """Skips a test compared with pins, before any collective, where TF was not run at this
    world size and k."""
    _pins(strategy)


def _outcome(fn: Callable[[], Any]) -> Any:
    try:
        return fn()
    except Exception as exc:  # every error is an outcome to compare
        return {"raises": type(exc).__name__}


def _local(strategy: Any, value: Any) -> list[Any]:
    return [np.asarray(x).tolist() for x in strategy.experimental_local_results(value)]


def _compare(test_comm: Any, strategy: Any, ours: dict[str, Any]) -> None:
    expected = _pins(strategy)
    found = {key: (expected[key], ours[key]) for key in ours if expected[key] != ours[key]}
    assert all_ranks_ok(test_comm, not found), f"(TF, ours): {found}"


@pytest.mark.usefixtures("tf_ran_here")
def test_update_non_slot_matches_tf(strategy: Any, test_comm: Any) -> None:
    """TF: ``MirroredExtended._update_non_slot`` (MWMS inherits it) asserts a tuple of devices
    (an array raises ``AssertionError``) and runs ``fn`` once per device of
    ``non_slot_devices()``: a ``Mirrored`` for two local replicas, the plain value for one."""
    with strategy.scope():
        v, w = Variable(1.0, name="v"), Variable(2.0, name="w")
    devices = strategy.extended.non_slot_devices([v, w])
    ext = strategy.extended
    grouped = ext.update_non_slot(devices, lambda: np.float32(5.0))
    ours = {
        "non_slot_devices_count": len(devices),
        "update_non_slot_array": _outcome(
            lambda: ext.update_non_slot(np.array([1.0]), lambda: np.float32(5.0))
        ),
        "update_non_slot_devices": _local(strategy, grouped),
        "update_non_slot_devices_kind": "Mirrored" if type(grouped) is Mirrored else "plain",
        "update_non_slot_ungrouped": type(
            ext.update_non_slot(devices, lambda: np.float32(5.0), group=False)
        ).__name__,
    }
    _compare(test_comm, strategy, ours)


@pytest.mark.usefixtures("tf_ran_here")
def test_group_matches_tf(strategy: Any, test_comm: Any) -> None:
    """TF (eager): ``group`` is the one flattened local result itself, else ``None``: a
    tensor is itself, a list is ``None``; ``run``'s result is itself at k = 1 (``None`` at
    k = 2); a mirrored variable gives its component at k = 1 (``None`` at k = 2)."""
    t = np.float32(1.0)
    with strategy.scope():
        v = Variable(1.0)
    per_replica = strategy.run(
        lambda: np.float32(ds.get_replica_context().replica_id_in_sync_group)
    )
    grouped = strategy.group(per_replica)
    group_var = strategy.group(v)
    ours = {
        "group_tensor": "itself" if strategy.group(t) is t else repr(strategy.group(t)),
        "group_list": strategy.group([t, t]),
        "group_per_replica": None if grouped is None else float(grouped),
        "group_variable": "component" if group_var is v.values[0] else group_var,
    }
    _compare(test_comm, strategy, ours)


@pytest.mark.usefixtures("tf_ran_here")
def test_mean_of_mirrored_is_the_callers_object(strategy: Any, test_comm: Any) -> None:
    """TF: ``CollectiveAllReduceExtended._reduce_to`` returns a ``Mirrored`` value itself for
    MEAN (``reduce`` then gives its first component, ``is``), moving nothing; SUM fails TF's
    assertion, on every worker alike."""
    k = len(strategy.extended.worker_devices)
    mirrored = Mirrored(tuple(np.array([1.0, 2.0], np.float32) for _ in range(k)))
    ours = {
        "reduce_mean_is_component_0": strategy.reduce("MEAN", mirrored, axis=None)
        is mirrored.values[0],
        "reduce_to_mean_is_mirrored": strategy.extended.reduce_to("MEAN", mirrored, "/cpu:0")
        is mirrored,
        "reduce_sum": _outcome(lambda: strategy.reduce("SUM", mirrored, axis=None)),
    }
    _compare(test_comm, strategy, ours)


def _get_next_steps(strategy: Any, dist: Any, steps: int) -> list[Any]:
    it = iter(dist)
    out: list[Any] = []
    try:
        for _ in range(steps):
            out.append(_local(strategy, it.get_next()))
    except errors.OutOfRangeError:
        out.append("OutOfRangeError")
    return out


def _optional_steps(strategy: Any, dist: Any, steps: int) -> list[Any]:
    it = iter(dist)
    out: list[Any] = []
    for _ in range(steps):
        opt = it.get_next_as_optional()
        has = bool(opt.has_value())
        out.append([has, _local(strategy, opt.get_value()) if has else None])
    return out


@pytest.mark.usefixtures("tf_ran_here")
@pytest.mark.parametrize("base", [5, 6])
def test_unbatched_datasets_from_function(strategy: Any, test_comm: Any, base: int) -> None:
    """TF 2.21: an unbatched ``Dataset.range`` of ``base`` elements per worker (starting at
    ``base * 10 * (task + 1)``); the local replicas take elements in turn. One worker drops
    an odd last element in a for-loop and ``get_next`` (padding it with 0 only in
    ``get_next_as_optional``); several workers pad it with 0 everywhere."""
    rank, _ = rank_size()
    k = len(strategy.extended.worker_devices)
    contexts: list[list[int]] = []

    def fn(ctx: Any) -> Any:
        contexts.append([ctx.num_input_pipelines, ctx.input_pipeline_id, ctx.num_replicas_in_sync])
        start = base * 10 * (rank + 1)
        return data.Dataset.range(start, start + base)

    dist = strategy.distribute_datasets_from_function(fn)
    ours = {
        f"ctx{base}": contexts,
        f"iter{base}": [_local(strategy, e) for e in dist],
        f"get_next{base}": _get_next_steps(strategy, dist, base + 1),
        f"optional{base}": _optional_steps(strategy, dist, base // k + 2),
    }
    _compare(test_comm, strategy, ours)


@pytest.mark.usefixtures("tf_ran_here")
def test_unbatched_unequal_lengths(strategy: Any, test_comm: Any) -> None:
    """TF 2.21: worker ``t`` holds ``3 + t`` unbatched elements; every worker runs as many
    steps as the longest needs, the ones that ran out getting zeros."""
    rank, _ = rank_size()
    dist = strategy.distribute_datasets_from_function(
        lambda _: data.Dataset.range(100 * rank, 100 * rank + 3 + rank)
    )
    _compare(test_comm, strategy, {"unequal iter": [_local(strategy, e) for e in dist]})


def test_scope_mixing_with_the_default_strategy(strategy: Any, test_comm: Any) -> None:
    """TF 2.21 (one worker, recorded by ``probe5.py``; the checks are local, so every worker
    alike): a variable made in MWMS's scope inside the default scope, or in its ``run``,
    raises ``RuntimeError`` "Mixing different ...: <MWMS> is not <default>"; the default
    scope inside MWMS's raises "Must not nest tf.distribute.Strategy scopes."; afterwards
    variables are made as before."""
    default = ds.get_strategy()
    mixing = re.escape(f"Mixing different tf.distribute.Strategy objects: {strategy} is not ")
    outcomes: list[str] = []

    def made_in_default_scope(make: Callable[[], Any]) -> None:
        try:
            with default.scope(), strategy.scope():
                make()
            outcomes.append("made")
        except RuntimeError as exc:
            outcomes.append(str(exc))

    made_in_default_scope(lambda: Variable(1.0))
    made_in_default_scope(lambda: strategy.run(lambda: Variable(1.0)))
    try:
        with strategy.scope(), default.scope():
            outcomes.append("entered")
    except RuntimeError as exc:
        outcomes.append(str(exc))
    with strategy.scope():
        after = Variable(1.0)
    ok = (
        all(re.match(mixing + re.escape(f"{default}") + "$", o) for o in outcomes[:2])
        and outcomes[2] == "Must not nest tf.distribute.Strategy scopes."
        and type(after) is MirroredVariable
    )
    assert all_ranks_ok(test_comm, ok), outcomes
