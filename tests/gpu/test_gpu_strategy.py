"""Every strategy API on CuPy arrays, at any world size, against serial numpy references.

The strategy runs on the GPU the way a program gets it (``MultiWorkerMirroredStrategy()`` on a
machine with CuPy and a GPU: one replica per rank on its node-local rank's GPU); under the fake
CuPy, also with a fake GPU per rank, so that its collectives go through the NCCL double at every
world size (``gpu-per-rank``). Replica r (its
global id) contributes data made from r alone, on its GPU; every result must be a CuPy array on
that GPU and equal the numpy reduction of every replica's data, computed on every rank.
"""

from __future__ import annotations

import types
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import mwms_mpi
import mwms_mpi.distribute as ds
from mwms_mpi import data, optimizers, train
from mwms_mpi.distribute.cluster_resolver import MPIClusterResolver
from mwms_mpi.types import ReduceOp, VariableAggregation, VariableSynchronization
from mwms_mpi.values import MirroredVariable, SyncOnReadVariable
from tests.gpu.conftest import FAKE, gpu_per_rank
from tests.support.mpi import all_ranks_ok
from tests.support.reference import rank_array

pytestmark = pytest.mark.mpi


@pytest.fixture(scope="module", params=["default", *(["gpu-per-rank"] if FAKE else [])])
def strategy(
    request: pytest.FixtureRequest, cp: types.ModuleType
) -> Iterator[ds.MultiWorkerMirroredStrategy]:
    if request.param == "gpu-per-rank":
        with gpu_per_rank():
            made = ds.MultiWorkerMirroredStrategy()
        communicator = made.extended.communicator
        assert communicator is None or communicator.transport.name == "nccl"
        yield made
    else:
        yield ds.MultiWorkerMirroredStrategy()


def _rid() -> int:
    ctx = ds.get_replica_context()
    assert ctx is not None
    return int(ctx.replica_id_in_sync_group)


def _per_replica(strategy: Any, cp: Any, make: Callable[[int], np.ndarray]) -> Any:
    """Each local replica's value, on its GPU (made from its global replica id)."""
    return strategy.experimental_distribute_values_from_function(
        lambda ctx: cp.asarray(make(ctx.replica_id_in_sync_group))
    )


def _on_device(cp: Any, value: Any, want: np.ndarray) -> bool:
    return (
        isinstance(value, cp.ndarray)
        and value.device == cp.cuda.Device()
        and value.dtype == want.dtype
        and np.array_equal(cp.asnumpy(value), want)
    )


def _replicas(strategy: Any) -> range:
    return range(strategy.num_replicas_in_sync)


def test_the_strategy_runs_on_the_gpu(strategy: Any, cp: Any) -> None:
    devices = strategy.extended.worker_devices
    assert devices and all("GPU" in d for d in devices)
    assert strategy.cluster_resolver.num_accelerators()["GPU"] == len(devices)
    communicator = strategy.extended.communicator
    if communicator is not None:
        assert communicator.transport.name in communicator.describe()


@pytest.mark.parametrize("op", ["SUM", "MEAN"])
@pytest.mark.parametrize("axis", [None, 0])
def test_reduce(strategy: Any, cp: Any, test_comm: Any, op: str, axis: int | None) -> None:
    def make(r: int) -> np.ndarray:
        return rank_array((4, 3), "float32", r)

    got = strategy.reduce(op, _per_replica(strategy, cp, make), axis=axis)
    everyone = np.stack([make(r) for r in _replicas(strategy)])
    want = everyone.sum(axis=0) if axis is None else everyone.sum(axis=(0, 1))
    if op == "MEAN":
        want = want / (len(everyone) * (1 if axis is None else 4))
    assert all_ranks_ok(test_comm, _on_device(cp, got, want.astype(np.float32)))


def test_reduce_to_and_batch_reduce_to(strategy: Any, cp: Any, test_comm: Any) -> None:
    a = _per_replica(strategy, cp, lambda r: rank_array((5,), "float64", r))
    b = _per_replica(strategy, cp, lambda r: rank_array((2, 2), "int32", r, 1))
    want_a = sum(rank_array((5,), "float64", r) for r in _replicas(strategy))
    want_b = sum(rank_array((2, 2), "int32", r, 1) for r in _replicas(strategy))
    one = strategy.extended.reduce_to(ReduceOp.SUM, a, a)
    batch = strategy.extended.batch_reduce_to(ReduceOp.SUM, [(a, a), (b, b)])
    results = [strategy.experimental_local_results(x) for x in (one, *batch)]
    ok = all(_on_device(cp, v, want_a) for v in results[0] + results[1])
    ok = ok and all(_on_device(cp, v, want_b.astype(np.int32)) for v in results[2])
    assert all_ranks_ok(test_comm, ok)


def test_replica_all_reduce_and_merge_call(strategy: Any, cp: Any, test_comm: Any) -> None:
    x = _per_replica(strategy, cp, lambda r: np.full(3, r + 1, np.float32))

    def step(v: Any) -> Any:
        ctx = ds.get_replica_context()
        summed = ctx.all_reduce("SUM", v)
        merged = ctx.merge_call(lambda s, w: s.reduce("MEAN", w, axis=None), args=(v,))
        return summed, merged

    summed, merged = strategy.run(step, args=(x,))
    n = strategy.num_replicas_in_sync
    want_sum = np.full(3, n * (n + 1) / 2, np.float32)
    ok = all(_on_device(cp, v, want_sum) for v in strategy.experimental_local_results(summed))
    ok = ok and all(
        _on_device(cp, v, want_sum / n) for v in strategy.experimental_local_results(merged)
    )
    assert all_ranks_ok(test_comm, ok)


def test_gather_and_all_gather_uneven(strategy: Any, cp: Any, test_comm: Any) -> None:
    def make(r: int) -> np.ndarray:
        return np.full((r % 3, 2), r, np.int64)

    x = _per_replica(strategy, cp, make)
    want = np.concatenate([make(r) for r in _replicas(strategy)])
    got = strategy.gather(x, axis=0)
    local = strategy.experimental_local_results(
        strategy.run(lambda v: ds.get_replica_context().all_gather(v, axis=0), args=(x,))
    )
    ok = _on_device(cp, got, want) and all(_on_device(cp, v, want) for v in local)
    assert all_ranks_ok(test_comm, ok)


def test_mirrored_variables_live_on_the_gpu(strategy: Any, cp: Any, test_comm: Any) -> None:
    with strategy.scope():
        v = mwms_mpi.Variable(
            cp.asarray(np.arange(4, dtype=np.float32)), aggregation=VariableAggregation.SUM
        )
    assert isinstance(v, MirroredVariable)
    strategy.run(lambda: v.assign_add(cp.full(4, _rid() + 1, dtype=cp.float32)))
    n = strategy.num_replicas_in_sync
    want = np.arange(4, dtype=np.float32) + n * (n + 1) / 2
    components = strategy.experimental_local_results(v)
    ok = _on_device(cp, v.read_value(), want)
    ok = ok and all(_on_device(cp, c.read_value(), want) for c in components)
    ok = ok and isinstance(v.numpy(), np.ndarray) and np.array_equal(v.numpy(), want)
    strategy.extended.update(v, lambda var, d: var.assign_sub(d), args=(cp.ones(4, cp.float32),))
    ok = ok and _on_device(cp, v.read_value(), want - 1)
    assert all_ranks_ok(test_comm, ok)


def test_scatters_and_the_loss_helper_stay_on_the_gpu(
    strategy: Any, cp: Any, test_comm: Any
) -> None:
    # Both take a device path of their own (rows applied one by one; CuPy's namespace): under
    # the fake, whose arrays are numpy arrays underneath, they once took the host path instead.
    with strategy.scope():
        v = mwms_mpi.Variable(cp.asarray(np.arange(12.0).reshape(4, 3)))
    delta = mwms_mpi.IndexedSlices(
        cp.asarray(np.ones((3, 3))), cp.asarray(np.array([0, 2, 0])), dense_shape=(4, 3)
    )
    want = np.arange(12.0).reshape(4, 3)
    np.add.at(want, [0, 2, 0], np.ones((3, 3)))
    v.scatter_add(delta)
    ok = _on_device(cp, v.read_value(), want)
    per_example = cp.asarray(np.arange(4.0))
    loss = mwms_mpi.nn.compute_average_loss(per_example, global_batch_size=8)
    ok = ok and _on_device(cp, loss, np.float64(6.0 / 8))
    assert all_ranks_ok(test_comm, ok)


def test_sync_on_read_variables_aggregate_on_the_gpu(
    strategy: Any, cp: Any, test_comm: Any
) -> None:
    with strategy.scope():
        v = mwms_mpi.Variable(
            cp.zeros(2, cp.float64),
            synchronization=VariableSynchronization.ON_READ,
            aggregation=VariableAggregation.SUM,
        )
    assert isinstance(v, SyncOnReadVariable)
    strategy.run(lambda: v.assign_add(cp.full(2, _rid() + 1.0)))
    n = strategy.num_replicas_in_sync
    assert all_ranks_ok(test_comm, _on_device(cp, v.read_value(), np.full(2, n * (n + 1) / 2)))


@pytest.mark.parametrize("name", ["sgd", "adam"])
@pytest.mark.fake_gpu_not_evidence
def test_optimizers_step_on_the_gpu_as_on_the_host(
    strategy: Any, cp: Any, test_comm: Any, name: str
) -> None:
    """The same steps on a device variable and on a host one: the same values (float64)."""
    init = rank_array((3, 4), "float64", 0) / 7.0

    def make() -> Any:
        return optimizers.SGD(0.1, momentum=0.9) if name == "sgd" else optimizers.Adam(0.01)

    with strategy.scope():
        on_gpu, on_host = mwms_mpi.Variable(cp.asarray(init)), mwms_mpi.Variable(init.copy())
        opt_gpu, opt_host = make(), make()
    for step in range(3):

        def replica_step(step: int = step) -> None:
            grad = rank_array((3, 4), "float64", _rid(), step) / 3.0
            opt_gpu.apply_gradients([(cp.asarray(grad), on_gpu)])
            opt_host.apply_gradients([(grad, on_host)])

        strategy.run(replica_step)
    got, want = on_gpu.read_value(), on_host.read_value()
    ok = isinstance(got, cp.ndarray) and isinstance(want, np.ndarray)
    ok = ok and np.allclose(cp.asnumpy(got), want, rtol=1e-12, atol=0)
    slots = opt_gpu._slots[id(on_gpu)]
    ok = ok and all(isinstance(s.read_value(), cp.ndarray) for s in slots)
    assert all_ranks_ok(test_comm, ok)


def test_checkpoint_saves_device_variables_in_the_same_format(
    strategy: Any, cp: Any, test_comm: Any, mpi_shared_dir: Path
) -> None:
    weights = np.arange(6, dtype=np.float32).reshape(2, 3)
    with strategy.scope():
        on_gpu = mwms_mpi.Variable(cp.asarray(weights))
        raw = cp.asarray(weights * 2)
        ckpt = train.Checkpoint(w=on_gpu, raw=raw)
        path = ckpt.save(str(mpi_shared_dir / "gpu"))
    on_gpu.assign(cp.zeros((2, 3), cp.float32))
    raw[...] = 0
    ckpt.restore(path).assert_consumed()
    ok = _on_device(cp, on_gpu.read_value(), weights) and _on_device(cp, raw, weights * 2)
    with strategy.scope():
        on_host = mwms_mpi.Variable(np.zeros((2, 3), np.float32))
    train.Checkpoint(w=on_host).restore(path)  # a host variable reads the same file
    ok = ok and isinstance(on_host.read_value(), np.ndarray)
    ok = ok and np.array_equal(on_host.read_value(), weights)
    assert all_ranks_ok(test_comm, ok)


def _first_batch(strategy: Any, options: Any = None) -> tuple[Any, ...]:
    n = strategy.num_replicas_in_sync
    dataset = data.Dataset.from_tensor_slices(np.arange(8 * n, dtype=np.float32)).batch(2 * n)
    batch = next(iter(strategy.experimental_distribute_dataset(dataset, options)))
    return tuple(strategy.experimental_local_results(batch))


def test_input_is_fetched_to_the_replicas_gpu(strategy: Any, cp: Any, test_comm: Any) -> None:
    fetched = _first_batch(strategy)
    kept = _first_batch(strategy, ds.InputOptions(experimental_fetch_to_device=False))
    ok = all(isinstance(b, cp.ndarray) and b.device == cp.cuda.Device() for b in fetched)
    ok = ok and all(type(b) is np.ndarray for b in kept)
    ok = ok and all(np.array_equal(cp.asnumpy(f), k) for f, k in zip(fetched, kept, strict=True))
    assert all_ranks_ok(test_comm, ok)


def test_a_strategy_kept_on_the_cpu_keeps_numpy(cp: Any, test_comm: Any) -> None:
    cpu = ds.MultiWorkerMirroredStrategy(MPIClusterResolver(num_accelerators={"GPU": 0}))
    ok = all("CPU" in d for d in cpu.extended.worker_devices)
    ok = ok and all(type(b) is np.ndarray for b in _first_batch(cpu))
    with cpu.scope():
        v = mwms_mpi.Variable(np.ones(2, np.float32))
    got = cpu.reduce("SUM", cpu.run(lambda: v.read_value()), axis=None)
    ok = ok and type(got) is np.ndarray and float(got[0]) == cpu.num_replicas_in_sync
    assert all_ranks_ok(test_comm, ok)


def test_two_gpus_per_worker_reduce_on_the_first_and_across_workers(
    cp: Any, test_comm: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """k = 2 replicas per worker, each on its GPU: the local sum on the first replica's GPU,
    then the workers' transport (under the fake: a GPU each, so NCCL, at 2 ranks and more)."""
    if FAKE:
        from tests.support.fake_cupy import GPUS_ENV

        monkeypatch.setenv(GPUS_ENV, "2")
    elif cp.cuda.runtime.getDeviceCount() < 2 * test_comm.size:
        pytest.skip("needs two GPUs per rank")
    resolver = MPIClusterResolver(num_accelerators={"GPU": 2})
    with gpu_per_rank():
        strategy = ds.MultiWorkerMirroredStrategy(resolver)
    communicator = strategy.extended.communicator
    ok = communicator is None or communicator.transport.name == "nccl"

    def make() -> Any:
        return cp.asarray(rank_array((6,), "float64", _rid()))

    x = strategy.run(make)
    local = strategy.experimental_local_results(x)
    ok = ok and [v.device.id for v in local] == [local[0].device.id, local[0].device.id + 1]
    want = sum(rank_array((6,), "float64", r) for r in _replicas(strategy))
    got = strategy.reduce("SUM", x, axis=None)
    ok = ok and isinstance(got, cp.ndarray) and np.array_equal(cp.asnumpy(got), want)
    summed = strategy.run(lambda v: ds.get_replica_context().all_reduce("SUM", v), args=(x,))
    ok = ok and all(
        np.array_equal(cp.asnumpy(v), want) for v in strategy.experimental_local_results(summed)
    )
    assert all_ranks_ok(test_comm, ok)
