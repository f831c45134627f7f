"""Checkpoints under MultiWorkerMirroredStrategy at any world size: only the chief's files remain.

Every rank saves rank-dependent values into one directory (made by rank 0, broadcast); the
chief's (rank 0's) values are what every rank then restores, and nothing of the other ranks'
writes is left behind. Outside any strategy the same holds by launch rank (issue 23, item 7),
and an optimizer restored before its first step continues exactly (item 4).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import mwms_mpi
import mwms_mpi.distribute as ds
from mwms_mpi import errors, optimizers, train
from mwms_mpi.train import _format, _lock
from tests.support.mpi import world

pytestmark = pytest.mark.mpi


@pytest.fixture(scope="module")
def strategy() -> Iterator[ds.MultiWorkerMirroredStrategy]:
    # One strategy (one communicator) for the whole module.
    yield ds.MultiWorkerMirroredStrategy()


class DuckVariable:
    """The variable protocol, tied to a strategy like a distributed variable."""

    def __init__(self, value: Any, strategy: Any = None) -> None:
        self.value = np.array(value)
        self.distribute_strategy = strategy

    def numpy(self) -> np.ndarray:
        return self.value.copy()

    def assign(self, value: Any) -> None:
        self.value = np.array(value, dtype=self.value.dtype)

    @property
    def shape(self) -> tuple[int, ...]:
        return self.value.shape


_COMM: list[Any] = []


@pytest.fixture(scope="module", autouse=True)
def _test_comm() -> Iterator[None]:
    # The tests' own checks run on a duplicate of COMM_WORLD, one per module
    # (docs/architecture.md, "Testing").
    _COMM.append(world())
    yield
    _COMM.pop().Free()


def _rank_size() -> tuple[int, int]:
    return _COMM[0].Get_rank(), _COMM[0].Get_size()


def _gather(value: Any) -> list[Any]:
    return list(_COMM[0].allgather(value))


def _names(directory: Path) -> list[str]:
    """The directory's entries, less the chief's lock (``_lock.LOCK_NAME``)."""
    return sorted(p.name for p in directory.iterdir() if p.name != _lock.LOCK_NAME)


def _spy_writes(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    seen: list[str] = []
    real = _format.write_checkpoint

    def spy(prefix: str, *args: Any) -> None:
        seen.append(prefix)
        real(prefix, *args)

    monkeypatch.setattr(_format, "write_checkpoint", spy)
    return seen


def test_only_the_chief_writes_and_every_rank_restores_its_values(
    strategy: ds.MultiWorkerMirroredStrategy, mpi_shared_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rank, size = _rank_size()
    assert strategy.extended.should_checkpoint == (rank == 0)
    seen = _spy_writes(monkeypatch)
    weights = np.arange(6, dtype=np.float64).reshape(2, 3) + 100 * rank
    var = DuckVariable([1.0 + rank, 2.0])
    ckpt = train.Checkpoint(model={"w": weights, "v": var})
    with strategy.scope():
        path = ckpt.save(str(mpi_shared_dir / "ckpt"))
    assert path == str(mpi_shared_dir / "ckpt-1")  # the chief's path, on every rank
    expected_prefix = path if rank == 0 else str(mpi_shared_dir / f"workertemp_{rank}" / "ckpt-1")
    assert seen == [expected_prefix]
    # save returned on every rank only after the chief's files were complete, and every
    # non-chief had removed its temporary directory.
    names = _names(mpi_shared_dir)
    assert [n for n in names if not n.startswith("ckpt-1.data-")] == [
        "checkpoint",
        "ckpt-1.index.json",
    ]
    assert len(names) == 3
    assert train.latest_checkpoint(str(mpi_shared_dir)) == path

    weights[:] = -1
    var.assign([0.0, 0.0])
    ckpt.restore(path).assert_consumed()
    np.testing.assert_array_equal(weights, np.arange(6).reshape(2, 3))  # rank 0's values
    np.testing.assert_array_equal(var.numpy(), [1.0, 2.0])
    assert len(set(_gather(weights.tobytes() + var.numpy().tobytes()))) == 1
    assert size == len(_gather(rank))


def test_manager_outside_scope_uses_the_variables_strategy(
    strategy: ds.MultiWorkerMirroredStrategy, mpi_shared_dir: Path
) -> None:
    rank, _ = _rank_size()
    step = DuckVariable(np.int64(0), strategy)
    ckpt = train.Checkpoint(step=step, extra=np.full(3, float(rank)))
    manager = train.CheckpointManager(ckpt, str(mpi_shared_dir), max_to_keep=2)
    for i in range(3):
        step.assign(i + 10 * rank)
        manager.save()
    # the same lists on every rank, naming the chief's files
    assert len(set(map(tuple, _gather(manager.checkpoints)))) == 1
    assert manager.checkpoints == [str(mpi_shared_dir / f"ckpt-{i}") for i in (2, 3)]
    names = _names(mpi_shared_dir)
    assert [n for n in names if n.endswith(".index.json")] == [
        "ckpt-2.index.json",
        "ckpt-3.index.json",
    ]
    assert not [n for n in names if n.startswith("workertemp_") or ".tmp" in n]
    fresh = DuckVariable(np.int64(-1), strategy)
    again = train.CheckpointManager(
        train.Checkpoint(step=fresh, extra=np.zeros(3)), str(mpi_shared_dir), max_to_keep=2
    )
    assert again.restore_or_initialize() == str(mpi_shared_dir / "ckpt-3")
    assert int(fresh.numpy()) == 2  # the chief's step at the last save
    assert _gather(int(fresh.numpy())) == [2] * len(_gather(0))


def test_a_failed_chief_write_raises_on_every_rank(
    strategy: ds.MultiWorkerMirroredStrategy, mpi_shared_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rank, size = _rank_size()
    real = _format.write_checkpoint

    def failing(prefix: str, *args: Any) -> None:
        if rank == 0:
            raise OSError("disk full on the chief")
        real(prefix, *args)

    monkeypatch.setattr(_format, "write_checkpoint", failing)
    ckpt = train.Checkpoint(a=np.ones(2))
    with strategy.scope():
        if rank == 0:
            with pytest.raises(OSError, match="disk full"):
                ckpt.save(str(mpi_shared_dir / "ckpt"))
        elif size > 1:
            with pytest.raises(errors.UnknownError, match="failed on another worker"):
                ckpt.save(str(mpi_shared_dir / "ckpt"))
    assert train.latest_checkpoint(str(mpi_shared_dir)) is None
    assert not [n for n in _names(mpi_shared_dir) if n.startswith("workertemp_")]


def test_real_variables_round_trip(
    strategy: ds.MultiWorkerMirroredStrategy, mpi_shared_dir: Path
) -> None:
    rank, _ = _rank_size()
    with strategy.scope():
        var = mwms_mpi.Variable(np.array([1.0, 2.0], dtype=np.float32))
        # a value each rank holds differently: what every rank restores is the chief's
        local = np.array([10.0 * rank + 3.0, -1.0 - rank])
        ckpt = train.Checkpoint(v=var, local=local)
        path = ckpt.save(str(mpi_shared_dir / "ckpt"))
        var.assign(np.array([0.0, 0.0], dtype=np.float32))
        local[...] = 99.0
        ckpt.restore(path).assert_consumed()
    np.testing.assert_array_equal(np.asarray(var.numpy()), [1.0, 2.0])
    for value in strategy.experimental_local_results(var):
        np.testing.assert_array_equal(np.asarray(value), [1.0, 2.0])
    np.testing.assert_array_equal(local, [3.0, -1.0])  # rank 0's, on every rank


def test_sync_on_read_variables_round_trip(
    strategy: ds.MultiWorkerMirroredStrategy, mpi_shared_dir: Path
) -> None:
    """A SUM SyncOnRead variable saves its aggregate and restores without reading back."""
    n = strategy.num_replicas_in_sync
    with strategy.scope():
        total = mwms_mpi.Variable(
            np.float64(0.0),
            synchronization=mwms_mpi.VariableSynchronization.ON_READ,
            aggregation=mwms_mpi.VariableAggregation.SUM,
        )
    strategy.run(lambda: total.assign_add(np.float64(2.0)))  # each replica adds locally
    ckpt = train.Checkpoint(total=total)
    path = ckpt.save(str(mpi_shared_dir / "sync"))
    assert float(total.numpy()) == 2.0 * n  # the save read the aggregate: 2 per replica
    total.assign(np.float64(0.0))
    ckpt.restore(path).assert_consumed()
    assert float(total.numpy()) == 2.0 * n


def test_numpy_checkpoints_outside_any_strategy_are_written_by_rank_0_only(
    mpi_shared_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Item 7's program: every rank saves a Checkpoint of plain numpy arrays outside any
    strategy's scope. Every rank was a chief: ranks swept each other's data files, and paths
    that ``save`` returned could not be read (``FileNotFoundError``)."""
    rank, size = _rank_size()
    seen = _spy_writes(monkeypatch)
    weights = np.full(4, float(rank))
    ckpt = train.Checkpoint(w=weights, step=np.array(rank))
    manager = train.CheckpointManager(ckpt, str(mpi_shared_dir / "managed"), max_to_keep=2)
    paths = [ckpt.save(str(mpi_shared_dir / "ckpt")) for _ in range(4)]
    managed = [manager.save() for _ in range(3)]
    assert paths == [str(mpi_shared_dir / f"ckpt-{i}") for i in range(1, 5)]
    assert managed == [str(mpi_shared_dir / "managed" / f"ckpt-{i}") for i in range(5, 8)]
    if rank == 0:
        assert seen == paths + managed
    else:
        temp = [
            mpi_shared_dir / f"workertemp_{rank}",
            mpi_shared_dir / "managed" / f"workertemp_{rank}",
        ]
        assert seen == [str(temp[0] / Path(p).name) for p in paths] + [
            str(temp[1] / Path(p).name) for p in managed
        ]
    _COMM[0].Barrier()  # outside a strategy nothing waits for rank 0's write: the program does
    assert manager.checkpoints == managed[1:]
    for path in paths + managed[1:]:
        target, step = np.ones(4), np.array(-1)
        train.Checkpoint(w=target, step=step).restore(path).assert_consumed()
        assert target.tolist() == [0.0] * 4 and int(step) == 0  # rank 0's values
    names = _names(mpi_shared_dir)
    assert [n for n in names if n.endswith(".index.json")] == [
        f"ckpt-{i}.index.json" for i in range(1, 5)
    ]
    assert len([n for n in names if ".data-" in n]) == 4 and "managed" in names
    assert not [n for n in names if n.startswith("workertemp_") or ".tmp" in n]
    assert (mpi_shared_dir / _lock.LOCK_NAME).exists()  # taken by rank 0, the only writer
    assert size == len(_gather(rank))


def test_a_chief_only_save_outside_any_strategy_keeps_working(mpi_shared_dir: Path) -> None:
    """``if rank == 0: ckpt.save(...)``, as TF programs do: no collective is involved."""
    rank, _ = _rank_size()
    values = np.arange(3.0) + 10 * rank
    ckpt = train.Checkpoint(v=values)
    path = ckpt.save(str(mpi_shared_dir / "solo")) if rank == 0 else None
    path = _COMM[0].bcast(path, root=0)
    target = np.zeros(3)
    train.Checkpoint(v=target).restore(path).assert_consumed()
    assert target.tolist() == [0.0, 1.0, 2.0]


def test_adam_restored_before_its_first_step_continues_exactly(
    strategy: ds.MultiWorkerMirroredStrategy, mpi_shared_dir: Path
) -> None:
    """Item 4 under MultiWorkerMirroredStrategy: build, restore, train equals training on."""
    rank, _ = _rank_size()
    grads = [np.full(3, g * (rank + 1), dtype=np.float64) for g in (1.0, -2.0, 0.5, 3.0)]

    def steps(opt: optimizers.Optimizer, var: Any, part: list[np.ndarray]) -> None:
        for g in part:
            strategy.run(lambda g=g: opt.apply_gradients([(g, var)]))

    with strategy.scope():
        straight, straight_opt = mwms_mpi.Variable(np.arange(3.0)), optimizers.Adam(0.1)
        var, opt = mwms_mpi.Variable(np.arange(3.0)), optimizers.Adam(0.1)
    steps(straight_opt, straight, grads)
    steps(opt, var, grads[:2])
    with strategy.scope():
        path = train.Checkpoint(v=var, optimizer=opt).save(str(mpi_shared_dir / "adam"))
        var2, opt2 = mwms_mpi.Variable(np.zeros(3)), optimizers.Adam(0.1)
    status = train.Checkpoint(v=var2, optimizer=opt2).restore(path)
    status.assert_existing_objects_matched()
    steps(opt2, var2, grads[2:])
    status.assert_consumed()
    assert int(opt2.iterations.numpy()) == 4
    got = [np.asarray(v).tobytes() for v in strategy.experimental_local_results(var2)]
    want = np.asarray(straight.numpy()).tobytes()
    assert got == [want] * len(got)
    assert len(set(_gather(want))) == 1
