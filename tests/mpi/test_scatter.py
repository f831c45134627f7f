"""``scatter_*`` on MirroredVariables across ranks, against a serial numpy reference per rank.

The rules are TF 2.21's: in replica context SUM and MEAN concatenate every replica's slices in
global replica order (MEAN divides the values by the number of replicas) and apply them to
every copy; NONE updates each replica's own copy; ONLY_FIRST_REPLICA applies each worker's
first local replica's slices (so at several workers the workers' copies differ, as in TF);
scatter_min/max/update refuse SUM and MEAN. The reference below re-states those rules in plain
numpy and never calls the package; ``scatter_tf_pins.json`` holds what real TF 2.21 workers
held after the same program (1, 2 and 4 loopback workers, one and two replicas each), and the
reference agreed with every one of them when they were recorded.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import mwms_mpi
from mwms_mpi import errors
from mwms_mpi.types import VariableAggregation as A
from tests.support.mpi import all_ranks_ok, odd_rank, rank_size, replica_id, still_works

pytestmark = pytest.mark.mpi

OPS = ["add", "sub", "mul", "div", "min", "max", "update"]
AGGREGATIONS = ["NONE", "SUM", "MEAN", "ONLY_FIRST_REPLICA"]
LENGTH = 8
INITIAL = np.arange(1.0, LENGTH + 1.0, dtype=np.float32)


def delta(g: int) -> tuple[np.ndarray, np.ndarray]:
    """Global replica ``g``'s slices: integer-valued floats, so sums and products are exact."""
    return np.array([2.0 + g, 3.0 + g], np.float32), np.array([g % LENGTH, LENGTH - 1], np.int32)


def apply(value: np.ndarray, op: str, values: np.ndarray, indices: np.ndarray) -> np.ndarray:
    """The serial reference of one scatter: rows in order, repeated indices one after another."""
    out = value.copy()
    for x, i in zip(values, indices, strict=True):
        if op == "add":
            out[i] += x
        elif op == "sub":
            out[i] -= x
        elif op == "mul":
            out[i] *= x
        elif op == "div":
            out[i] /= x
        elif op == "min":
            out[i] = min(out[i], x)
        elif op == "max":
            out[i] = max(out[i], x)
        else:
            out[i] = x
    return out


def replica_reference(op: str, aggregation: str, rank: int, k: int, n: int) -> list[np.ndarray]:
    """What each of this rank's k copies holds after one replica-context scatter."""
    if aggregation == "NONE":
        return [apply(INITIAL, op, *delta(rank * k + j)) for j in range(k)]
    if aggregation == "ONLY_FIRST_REPLICA":
        return [apply(INITIAL, op, *delta(rank * k))] * k
    values = np.concatenate([delta(g)[0] for g in range(n)])
    indices = np.concatenate([delta(g)[1] for g in range(n)])
    if aggregation == "MEAN":
        values = values / np.float32(n)
    return [apply(INITIAL, op, values, indices)] * k


def refused(op: str, aggregation: str) -> bool:
    return op in ("min", "max", "update") and aggregation in ("SUM", "MEAN")


def local(strategy: Any, v: Any) -> list[np.ndarray]:
    return [np.asarray(c.numpy()) for c in strategy.experimental_local_results(v)]


def close(actual: list[np.ndarray], expected: list[np.ndarray]) -> bool:
    return len(actual) == len(expected) and all(
        a.dtype == np.float32 and np.allclose(a, e, rtol=1e-6, atol=0)
        for a, e in zip(actual, expected, strict=True)
    )


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("aggregation", AGGREGATIONS)
def test_replica_context_scatter(strategy: Any, test_comm: Any, aggregation: str, op: str) -> None:
    rank, _ = rank_size()
    k, n = len(strategy.extended.worker_devices), strategy.num_replicas_in_sync
    with strategy.scope():
        v = mwms_mpi.Variable(INITIAL, aggregation=A[aggregation])

    def fn() -> Any:
        values, indices = delta(replica_id())
        return getattr(v, f"scatter_{op}")(mwms_mpi.IndexedSlices(values, indices))

    if refused(op, aggregation):
        try:
            strategy.run(fn)
            message = ""
        except NotImplementedError as error:
            message = str(error)
        ok = message.startswith(f"scatter_{op} is only supported for mirrored variable") and (
            message.endswith(f"got: VariableAggregationV2.{aggregation}.")
        )
        assert all_ranks_ok(test_comm, ok), message
        assert all_ranks_ok(test_comm, close(local(strategy, v), [INITIAL] * k))
        return
    result = strategy.run(fn)
    expected = replica_reference(op, aggregation, rank, k, n)
    got = local(strategy, v)
    returned = [np.asarray(r) for r in strategy.experimental_local_results(result)]
    ok = close(got, expected) and close(returned, expected)
    assert all_ranks_ok(test_comm, ok), (got, expected)


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("aggregation", AGGREGATIONS)
def test_cross_replica_scatter(strategy: Any, test_comm: Any, aggregation: str, op: str) -> None:
    k = len(strategy.extended.worker_devices)
    with strategy.scope():
        v = mwms_mpi.Variable(INITIAL, aggregation=A[aggregation])
    values, indices = delta(3)
    call = lambda: getattr(v, f"scatter_{op}")(mwms_mpi.IndexedSlices(values, indices))  # noqa: E731
    if refused(op, aggregation):
        try:
            call()
            message = ""
        except NotImplementedError as error:
            message = str(error)
        assert all_ranks_ok(test_comm, message.startswith(f"scatter_{op} is only")), message
        return
    result = call()
    expected = [apply(INITIAL, op, values, indices)] * k
    returned = [np.asarray(r) for r in strategy.experimental_local_results(result)]
    ok = close(local(strategy, v), expected) and close(returned, expected)
    assert all_ranks_ok(test_comm, ok)


def test_sync_on_read_and_batch_scatter_refused(strategy: Any, test_comm: Any) -> None:
    with strategy.scope():
        r = mwms_mpi.Variable(
            INITIAL,
            synchronization=mwms_mpi.VariableSynchronization.ON_READ,
            aggregation=A.SUM,
        )
        m = mwms_mpi.Variable(INITIAL, aggregation=A.SUM)
    messages = []
    for call in (
        lambda: strategy.run(lambda: r.scatter_add(mwms_mpi.IndexedSlices(*delta(0)))),
        lambda: r.scatter_add(mwms_mpi.IndexedSlices(*delta(0))),
        lambda: m.batch_scatter_update(mwms_mpi.IndexedSlices(*delta(0))),
    ):
        try:
            call()
            messages.append(None)
        except NotImplementedError as error:
            messages.append(str(error))
    expected = ["Variables with `synchronization=ON_READ` doesn't support `scatter_add`"] * 2
    assert all_ranks_ok(test_comm, messages == [*expected, ""]), messages


def test_replica_scatter_then_reduce_still_agrees(strategy: Any, test_comm: Any) -> None:
    """A scatter's collective is agreed like any other: a later reduce sees equal copies."""
    with strategy.scope():
        v = mwms_mpi.Variable(INITIAL, aggregation=A.SUM)
    strategy.run(lambda: v.scatter_add(mwms_mpi.IndexedSlices(*delta(replica_id()))))
    total = strategy.reduce("SUM", strategy.run(lambda: v.read_value()), axis=None)
    n = strategy.num_replicas_in_sync
    expected = replica_reference("add", "SUM", 0, 1, n)[0] * n
    assert all_ranks_ok(test_comm, bool(np.allclose(total, expected, rtol=1e-6, atol=0)))


PINS = Path(__file__).with_name("scatter_tf_pins.json")


@pytest.mark.parametrize(
    ("aggregation", "op"),
    [(a, op) for a in AGGREGATIONS for op in OPS if not refused(op, a)],
)
def test_replica_context_matches_tf_workers(
    strategy: Any, test_comm: Any, aggregation: str, op: str
) -> None:
    """The same program as :func:`test_replica_context_scatter` against what each TF 2.21
    worker held (``scatter_tf_pins.json``: 1, 2 and 4 workers, k = 1 and 2)."""
    rank, size = rank_size()
    k = len(strategy.extended.worker_devices)
    pins = json.loads(PINS.read_text(encoding="utf-8"))
    if f"n{size}_k{k}" not in pins:
        pytest.skip("TF 2.21 was recorded at 1, 2 and 4 workers")
    with strategy.scope():
        v = mwms_mpi.Variable(INITIAL, aggregation=A[aggregation])
    strategy.run(lambda: getattr(v, f"scatter_{op}")(mwms_mpi.IndexedSlices(*delta(replica_id()))))
    expected = [np.float32(c) for c in pins[f"n{size}_k{k}"][rank][f"{aggregation} {op}"]]
    got = local(strategy, v)
    assert all_ranks_ok(test_comm, close(got, expected)), (got, expected)


def rows_of(g: int) -> tuple[np.ndarray, np.ndarray]:
    """Replica ``g``'s slices of a [6, 2] variable: 1 to 3 rows, so replicas send unequal sizes."""
    count = g % 3 + 1
    indices = (np.arange(count) + g) % 6
    return np.full([count, 2], g + 1.0, np.float32), indices.astype(np.int32)


@pytest.mark.parametrize("aggregation", AGGREGATIONS)
def test_unequal_row_counts_per_replica(strategy: Any, test_comm: Any, aggregation: str) -> None:
    rank, _ = rank_size()
    k, n = len(strategy.extended.worker_devices), strategy.num_replicas_in_sync
    start = np.zeros([6, 2], np.float32)
    with strategy.scope():
        v = mwms_mpi.Variable(start, aggregation=A[aggregation])
    strategy.run(lambda: v.scatter_add(mwms_mpi.IndexedSlices(*rows_of(replica_id()))))
    if aggregation == "NONE":
        expected = [apply(start, "add", *rows_of(rank * k + j)) for j in range(k)]
    elif aggregation == "ONLY_FIRST_REPLICA":
        expected = [apply(start, "add", *rows_of(rank * k))] * k
    else:
        scale = np.float32(n if aggregation == "MEAN" else 1)
        total = start
        for g in range(n):
            values, indices = rows_of(g)
            total = apply(total, "add", values / scale, indices)
        expected = [total] * k
    assert all_ranks_ok(test_comm, close(local(strategy, v), expected))


def test_a_scatter_against_another_update_raises_on_every_rank(
    strategy: Any, test_comm: Any
) -> None:
    """A replica-context scatter's reduction says what it is for: ranks that scatter_add and
    scatter_sub the same layout raise together instead of mixing their slices."""
    rank, size = rank_size()
    with strategy.scope():
        v = mwms_mpi.Variable(INITIAL, name="w", aggregation=A.SUM)
    method = "scatter_sub" if odd_rank() else "scatter_add"
    call = lambda: strategy.run(  # noqa: E731
        lambda: getattr(v, method)(mwms_mpi.IndexedSlices(*delta(replica_id())))
    )
    if size == 1:
        call()
        return
    try:
        call()
        outcome = "returned without raising"
    except Exception as exc:  # checked below, on every rank alike
        texts = ["MirroredVariable.scatter_add of `w`", "MirroredVariable.scatter_sub of `w`"]
        missing = [t for t in texts if t not in str(exc)]
        ok = isinstance(exc, errors.InvalidArgumentError) and not missing
        outcome = "" if ok else f"{type(exc).__name__}: {exc} (missing {missing})"
    assert all_ranks_ok(test_comm, not outcome), f"rank {rank}: {outcome}"
    assert all_ranks_ok(
        test_comm, close(local(strategy, v), [INITIAL] * len(strategy.extended.worker_devices))
    )
    still_works(strategy)
