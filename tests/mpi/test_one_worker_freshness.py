"""MultiWorkerMirroredStrategy's results are fresh values, at one worker too (k = 1 and 2).

At world size 1 nothing needs communicating, so a result can silently be an input (TF's
pass-throughs for one replica, for ``MEAN`` of one value, for int32 ``MEAN`` of one replica)
or a buffer the next call of the same layout reuses. Each public reduction is called once,
then its inputs are overwritten, the same call is made again with other values and the
caller writes into those second results: the first results must still equal their serial
numpy references, share no memory with an input, and a ``Mirrored``/``PerReplica`` result's
local copies none with each other (TF's copies are tensors on separate devices). The test
runs at every world size of ``make test-mpi``; world size 1 is the case it was written for.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import mwms_mpi.distribute as ds
from tests.support.mpi import all_ranks_ok

pytestmark = pytest.mark.mpi

COUNT = 5


def _rid() -> int:
    ctx = ds.get_replica_context()
    assert ctx is not None
    return int(ctx.replica_id_in_sync_group)


def _value(replica: int, dtype: str, salt: int) -> np.ndarray:
    """Global replica ``replica``'s contribution: small integers, so float sums are exact."""
    return (np.arange(COUNT) * (replica + 1) + replica + 10 * salt).astype(dtype)


def _sum(values: list[np.ndarray]) -> np.ndarray:
    return np.sum(np.stack(values), axis=0, dtype=values[0].dtype)


def _divide(total: np.ndarray, count: int, replicas: int) -> np.ndarray:
    """TF's MEAN: none with one replica; int32 by truediv (float64), floats in their dtype
    (the float64 quotient rounds to the same float32 as a float32 division)."""
    if replicas == 1 and count == 1:
        return total
    if total.dtype.kind == "i":
        return total.astype(np.float64) / count
    return (total.astype(np.float64) / count).astype(total.dtype)


def _expected(op: str, values: dict[int, np.ndarray]) -> np.ndarray:
    """``op`` over every global replica's value (axis=None)."""
    total, n = _sum(list(values.values())), len(values)
    return total if op == "SUM" else _divide(total, n, n)


Inputs = dict[int, np.ndarray]
Outcome = tuple[list[Any], list[np.ndarray], list[np.ndarray]]  # results, references, inputs
Call = Callable[[Any, str, Inputs], Outcome]


def _reduce(s: Any, op: str, xs: Inputs) -> Outcome:
    out = s.reduce(op, s.run(lambda: xs[_rid()]), axis=None)
    return [out], [_expected(op, xs)], list(xs.values())


def _reduce_axis(s: Any, op: str, xs: Inputs) -> Outcome:
    out = s.reduce(op, s.run(lambda: xs[_rid()]), axis=0)
    total = np.sum(np.concatenate(list(xs.values())), dtype=xs[0].dtype)
    if op == "MEAN":  # divided by the element count along the axis (TF's truediv dtypes)
        count = COUNT * len(xs)
        total = total / count if total.dtype.kind == "i" else total.dtype.type(total / count)
    return [out], [np.asarray(total)], list(xs.values())


def _gather(s: Any, op: str, xs: Inputs) -> Outcome:
    out = s.gather(s.run(lambda: xs[_rid()]), axis=0)
    return [out], [np.concatenate([xs[r] for r in sorted(xs)])], list(xs.values())


def _reduce_to(s: Any, op: str, xs: Inputs) -> Outcome:
    pr = s.run(lambda: xs[_rid()])
    out = list(s.experimental_local_results(s.extended.reduce_to(op, pr, pr)))
    return out, [_expected(op, xs)] * len(out), list(xs.values())


def _batch(s: Any, op: str, xs: Inputs) -> Outcome:
    tails = {r: x[1:].copy() for r, x in xs.items()}  # a second layout in the same batch
    pairs = []
    for values in (xs, tails):
        pr = s.run(lambda values=values: values[_rid()])
        pairs.append((pr, pr))
    got: list[Any] = []
    want: list[np.ndarray] = []
    for out, values in zip(s.extended.batch_reduce_to(op, pairs), (xs, tails), strict=True):
        local = list(s.experimental_local_results(out))
        got += local
        want += [_expected(op, values)] * len(local)
    return got, want, [*xs.values(), *tails.values()]


def _all_reduce(s: Any, op: str, xs: Inputs) -> Outcome:
    def fn() -> Any:
        x = xs[_rid()]
        return ds.get_replica_context().all_reduce(op, {"a": x, "b": [x[:2]]})

    got: list[Any] = []
    want: list[np.ndarray] = []
    heads = {r: x[:2] for r, x in xs.items()}
    for nest in s.experimental_local_results(s.run(fn)):
        got += [nest["a"], nest["b"][0]]
        want += [_expected(op, xs), _expected(op, heads)]
    return got, want, list(xs.values())


def _host(s: Any, op: str, xs: Inputs) -> Outcome:
    # A value that is not per-replica: MEAN returns it (TF), SUM only with one replica.
    host = xs[0]
    op = op if s.num_replicas_in_sync == 1 else "MEAN"
    out = [s.reduce(op, host, axis=None)]
    out += list(s.experimental_local_results(s.extended.reduce_to(op, host, host)))
    return out, [host.copy() for _ in out], [host]


CALLS: dict[str, Call] = {
    "Strategy.reduce": _reduce,
    "Strategy.reduce(axis=0)": _reduce_axis,
    "Strategy.gather": _gather,
    "reduce_to": _reduce_to,
    "batch_reduce_to": _batch,
    "ReplicaContext.all_reduce": _all_reduce,
    "host values": _host,
}


@pytest.mark.parametrize("dtype", ["float32", "int32", "float64"])
@pytest.mark.parametrize("op", ["SUM", "MEAN"])
@pytest.mark.parametrize("api", list(CALLS))
def test_results_are_fresh_and_never_change_later(
    strategy: Any, test_comm: Any, api: str, op: str, dtype: str
) -> None:
    if api == "Strategy.gather" and op == "MEAN":
        pytest.skip("a gather has no op")
    if api == "host values" and test_comm.Get_size() > 1:
        pytest.skip("one worker only (across workers each worker's is a term: test_strategy.py)")
    n = strategy.num_replicas_in_sync
    call = CALLS[api]
    xs = {r: _value(r, dtype, 0) for r in range(n)}
    got, want, inputs = call(strategy, op, xs)
    problems = []
    for i, a in enumerate(got):
        if not isinstance(a, np.ndarray):
            problems.append(f"result {i} is a {type(a).__name__}, not an array")
            continue
        if any(np.shares_memory(a, x) for x in inputs):
            problems.append(f"result {i} shares memory with an input")
        if any(isinstance(b, np.ndarray) and np.shares_memory(a, b) for b in got[i + 1 :]):
            problems.append(f"result {i} shares memory with a later result of the same call")
    kept = [np.array(a, copy=True) for a in got]
    for x in inputs:
        x[...] = -7  # the caller reuses its input buffers
    again, _, _ = call(strategy, op, {r: _value(r, dtype, 1) for r in range(n)})
    for a in again:
        a[...] = -9  # and writes into the next call's results
    for i, (a, before, w) in enumerate(zip(got, kept, want, strict=True)):
        w = np.asarray(w)
        if not np.array_equal(before, w) or np.asarray(a).dtype != w.dtype:
            problems.append(f"result {i}: {before!r}, expected {w!r}")
        elif not np.array_equal(a, before):
            problems.append(f"result {i} changed later: {before!r} became {a!r}")
    rank = test_comm.Get_rank()
    assert all_ranks_ok(test_comm, not problems), f"rank {rank}, {api} {op} {dtype}: {problems}"
