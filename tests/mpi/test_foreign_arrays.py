"""Arrays from other libraries (a ``jax.Array``, a minimal ``__array__`` stand-in) through every
collective API under MPI, at this world size, k = 1 and k = 2: every rank compares each result
with a serial numpy reference (type, dtype and value), and the ranks agree before asserting.

Values are small integers times the global replica number, so float32 sums are exact in any
order and compared exactly; a MEAN divides an exact sum once (correctly rounded, as numpy).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import mwms_mpi
import mwms_mpi.distribute as ds
from mwms_mpi import optimizers
from mwms_mpi.types import ReduceOp
from tests.support.mpi import all_ranks_ok, rank_size, replica_id

jnp = pytest.importorskip("jax.numpy")

pytestmark = pytest.mark.mpi

BASE = np.array([1.0, 2.0, 3.0], np.float32)


class OnlyArray:
    """A minimal foreign array: nothing but ``__array__``."""

    def __init__(self, value: Any) -> None:
        self._value = np.array(value)

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        return self._value if dtype is None else self._value.astype(dtype)


def _mixed(value: Any) -> Any:
    """JAX on even ranks, numpy on odd ones: the agreement must see the same arrays."""
    return jnp.asarray(value) if rank_size()[0] % 2 == 0 else np.asarray(value)


WRAPS: dict[str, Callable[[Any], Any]] = {
    "jax": jnp.asarray,
    "only_array": OnlyArray,
    "mixed_with_numpy": _mixed,
}


def _local(value: Any) -> list[Any]:
    return list(value.values) if isinstance(value, ds.DistributedValues) else [value]


def _differences(name: str, ours: Any, expected: np.ndarray) -> list[str]:
    found = []
    for a in _local(ours):
        if type(a) is not np.ndarray:
            found.append(f"{name}: {type(a).__name__}, not numpy")
        elif a.dtype != expected.dtype or not np.array_equal(a, expected):
            found.append(f"{name}: {a!r} != {expected!r}")
    return found


def _check(strategy: Any, wrap: Callable[[Any], Any]) -> list[str]:
    n = strategy.num_replicas_in_sync
    ext, ctx = strategy.extended, ds.get_replica_context
    grads = [BASE * np.float32(i + 1) for i in range(n)]  # replica i's value, serially
    total = np.sum(grads, axis=0, dtype=np.float32)
    gathered = np.concatenate(grads)

    def mine() -> Any:
        return wrap(BASE * np.float32(replica_id() + 1))

    with strategy.scope():
        v = mwms_mpi.Variable(wrap(BASE))
        opt = optimizers.SGD(0.5)
    found = _differences("Variable", v.numpy(), BASE)
    v.assign(wrap(BASE * 2), read_value=False)
    v.assign_add(wrap(BASE), read_value=False)
    v.assign_sub(wrap(BASE * 2), read_value=False)
    found += _differences("assign*", v.numpy(), BASE)
    strategy.run(lambda: opt.apply_gradients([(mine(), v)]))
    found += _differences("apply_gradients", v.numpy(), BASE - np.float32(0.5) * total)
    per_replica = strategy.run(mine)
    found += _differences("reduce", strategy.reduce("SUM", per_replica, axis=None), total)
    mean0 = np.float32(gathered.astype(np.float64).sum() / gathered.size)
    found += _differences("reduce axis", strategy.reduce("MEAN", per_replica, axis=0), mean0)
    found += _differences("gather", strategy.gather(per_replica, axis=0), gathered)
    found += _differences("reduce_to", ext.reduce_to(ReduceOp.SUM, per_replica, v), total)
    mean = np.float32(total.astype(np.float64) / n)
    batch = ext.batch_reduce_to(ReduceOp.MEAN, [(per_replica, v), (strategy.run(mine), v)])
    for result in batch:
        found += _differences("batch_reduce_to", result, mean)
    reduced = strategy.run(lambda: ctx().all_reduce(ReduceOp.SUM, [mine(), mine()]))
    for result in reduced:
        found += _differences("all_reduce", result, total)
    found += _differences(
        "all_gather", strategy.run(lambda: ctx().all_gather(mine(), axis=0)), gathered
    )
    return found


@pytest.mark.parametrize("wrap", sorted(WRAPS))
def test_collectives_take_foreign_arrays(strategy: Any, test_comm: Any, wrap: str) -> None:
    found = _check(strategy, WRAPS[wrap])
    assert all_ranks_ok(test_comm, not found), found
