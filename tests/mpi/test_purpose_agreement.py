"""Every purpose that issues a collective agrees its own name (issue 23, item 3), and the opt-in
``MWMS_MPI_CHECK=callsite`` mode agrees the user's source line too.

Reading a SyncOnRead variable was agreed as ``Strategy.reduce``, so a chief-only
``print(metric.numpy())`` on rank 0 was matched with a ``strategy.reduce(SUM)`` of the same
dtype on rank 1 and both printed wrong numbers. Now each purpose names itself ("SyncOnRead read
of `accuracy`", "MirroredVariable.assign_add of `w`", "Variable creation of `w`", the input's
end-of-data check), equivalent reads still match, and every rank raises naming what each rank
called. Runs at any world size (one rank: each program gives the right numbers), k = 1 and 2.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import mwms_mpi
import mwms_mpi.distribute as ds
from mwms_mpi import errors
from mwms_mpi.collective import Communicator
from mwms_mpi.data import Dataset
from mwms_mpi.distribute.cluster_resolver import MPIClusterResolver
from mwms_mpi.train import Checkpoint
from tests.support.mpi import all_ranks_ok, odd_rank, rank_size, replica_id, still_works

pytestmark = pytest.mark.mpi

A = mwms_mpi.VariableAggregation
S = mwms_mpi.VariableSynchronization


def _metric(strategy: Any, name: str, dtype: Any = np.float32) -> Any:
    """A SUM metric (as Keras makes ``total``) holding the serial sum of ``replica id + 1``."""
    with strategy.scope():
        m = mwms_mpi.Variable(
            np.zeros((), dtype), name=name, synchronization=S.ON_READ, aggregation=A.SUM
        )
    strategy.run(lambda: m.assign_add(np.asarray(replica_id() + 1, dtype)))
    return m


def _serial(strategy: Any) -> float:
    n = strategy.num_replicas_in_sync
    return float(n * (n + 1) // 2)


def _raises_naming(
    strategy: Any, test_comm: Any, call: Callable[[], Any], texts: Callable[[int], list[str]]
) -> None:
    """Every rank raises ``InvalidArgumentError``, naming ``texts(rank)``; one rank: no error."""
    rank, size = rank_size()
    if size == 1:
        call()
        return
    try:
        call()
        outcome = "returned without raising"
    except Exception as exc:  # checked below, on every rank alike
        missing = [t for t in texts(rank) if t not in str(exc)]
        ok = isinstance(exc, errors.InvalidArgumentError) and not missing
        outcome = "" if ok else f"{type(exc).__name__}: {exc} (missing {missing})"
    assert all_ranks_ok(test_comm, not outcome), f"rank {rank}: {outcome}"
    still_works(strategy)


# -- item 3, exactly as reported ---------------------------------------------------------------


def test_item3_chief_only_print_of_a_metric_against_a_reduce(
    strategy: Any, test_comm: Any, capsys: Any
) -> None:
    # rank 0: print(metric.numpy()); rank 1: strategy.reduce(SUM) of the same dtype. Both
    # printed wrong numbers (each got the other's value added), exit 0.
    rank, size = rank_size()
    metric = _metric(strategy, "accuracy")

    def program() -> None:
        if rank == 0:
            print(metric.numpy())
        else:
            print(strategy.reduce("SUM", np.float32(5.0), axis=None))

    if size == 1:
        program()
        assert float(capsys.readouterr().out) == _serial(strategy)
        return
    peer = 1 if rank == 0 else rank
    want = f"SyncOnRead read of `accuracy` on rank 0, Strategy.reduce on rank {peer}"
    _raises_naming(strategy, test_comm, program, lambda r: [want])
    assert capsys.readouterr().out == ""  # nothing printed: no wrong number anywhere


def test_equivalent_reads_on_different_ranks_match(strategy: Any, test_comm: Any) -> None:
    rank, _ = rank_size()
    metric = _metric(strategy, "accuracy")
    reads: list[Callable[[], Any]] = [
        metric.read_value,
        metric.numpy,
        metric.value,
        lambda: np.asarray(metric, metric.dtype),  # a 0-d read with no dtype raises, as TF
        lambda: strategy.extended.read_var(metric),
    ]
    got = [float(np.asarray(reads[(rank + i) % len(reads)]())) for i in range(len(reads))]
    assert all_ranks_ok(test_comm, got == [_serial(strategy)] * len(reads)), f"{rank}: {got}"


def test_reading_another_metric_on_one_rank(strategy: Any, test_comm: Any) -> None:
    accuracy, loss = _metric(strategy, "accuracy"), _metric(strategy, "loss")
    read = (loss if odd_rank() else accuracy).read_value
    texts = ["SyncOnRead read of `accuracy` on rank", "SyncOnRead read of `loss` on rank"]
    _raises_naming(strategy, test_comm, read, lambda r: texts)


def test_a_checkpoint_reads_a_metric_with_the_same_purpose(
    strategy: Any, test_comm: Any, tmp_path: Path
) -> None:
    # rank 0 writes a checkpoint of `accuracy` while the others read `loss`: the save's read
    # is "SyncOnRead read of `accuracy`", named as such; nothing is written.
    rank, size = rank_size()
    accuracy, loss = _metric(strategy, "accuracy"), _metric(strategy, "loss")
    prefix = tmp_path / f"rank{rank}" / "ckpt"
    if size == 1:
        Checkpoint(accuracy=accuracy).write(str(prefix))
        return
    call = Checkpoint(accuracy=accuracy).write if rank == 0 else (lambda _: loss.read_value())
    texts = ["SyncOnRead read of `accuracy` on rank 0", "SyncOnRead read of `loss` on rank"]
    _raises_naming(strategy, test_comm, lambda: call(str(prefix)), lambda r: texts)
    assert not prefix.parent.exists() or not any(prefix.parent.iterdir())


def test_a_cross_replica_assign_against_a_read(strategy: Any, test_comm: Any) -> None:
    # A cross-replica assign reads the variable back (a collective): its purpose is the assign.
    metric = _metric(strategy, "accuracy")
    comm = strategy.extended._communicator
    before = comm.calls if comm is not None else 0
    metric.assign(np.float32(6.0), read_value=False)  # no read back: no collective at all
    assert (comm.calls if comm is not None else 0) == before
    call = (lambda: metric.assign(np.float32(0.0))) if odd_rank() else metric.read_value
    texts = ["SyncOnReadVariable.assign of `accuracy` on rank", "SyncOnRead read of `accuracy`"]
    _raises_naming(strategy, test_comm, call, lambda r: texts)


def test_errors_where_nothing_communicates_stay_on_their_rank(
    strategy: Any, test_comm: Any
) -> None:
    # TF raises these on the rank alone, before any collective; no agreement is made for them,
    # so a rank may catch them while the others go on.
    metric = _metric(strategy, "accuracy")
    with strategy.scope():
        unaggregated = mwms_mpi.Variable(
            np.zeros((), np.float32), name="none", synchronization=S.ON_READ
        )
    comm = strategy.extended._communicator
    before = comm.calls if comm is not None else 0
    if odd_rank() or rank_size()[1] == 1:
        with pytest.raises(ValueError, match="does not support `assign_add`"):
            metric.assign_add(np.float32(1.0), read_value=False)
        with pytest.raises(ValueError):
            unaggregated.read_value()
    assert (comm.calls if comm is not None else 0) == before
    assert all_ranks_ok(test_comm, float(metric.numpy()) == _serial(strategy))


def test_replica_updates_of_a_mirrored_variable_name_their_method(
    strategy: Any, test_comm: Any
) -> None:
    with strategy.scope():
        w = mwms_mpi.Variable(np.zeros(2, np.float32), name="w", aggregation=A.SUM)
    odd = odd_rank()

    def step() -> Any:
        g = np.ones(2, np.float32)
        return w.assign_add(g) if odd else w.assign(g)

    texts = ["MirroredVariable.assign_add of `w` on rank", "MirroredVariable.assign of `w` on rank"]
    _raises_naming(strategy, test_comm, lambda: strategy.run(step), lambda r: texts)


def test_variables_created_in_another_order(strategy: Any, test_comm: Any) -> None:
    # TF broadcasts by creation order: `b` would start from the chief's `w` (equal shapes).
    rank, _ = rank_size()
    names = ["b", "w"] if odd_rank() else ["w", "b"]

    def create() -> None:
        with strategy.scope():
            for name in names:
                mwms_mpi.Variable(np.full(2, rank, np.float32), name=name)

    texts = ["Variable creation of `w` on rank", "Variable creation of `b` on rank"]
    _raises_naming(strategy, test_comm, create, lambda r: texts)


def test_end_of_data_against_another_call(strategy: Any, test_comm: Any) -> None:
    n = strategy.num_replicas_in_sync
    dataset = strategy.experimental_distribute_dataset(Dataset.range(4 * n).batch(2 * n))
    iterator = iter(dataset)
    # next() and get_next_as_optional() take the same step: they match.
    first = iterator.get_next_as_optional().get_value() if odd_rank() else next(iterator)
    local = [np.asarray(v) for v in strategy.experimental_local_results(first)]
    assert all(len(v) == 2 for v in local)
    ones = strategy.run(lambda: np.float32(1.0))
    call = (lambda: next(iterator)) if odd_rank() else (lambda: strategy.reduce("SUM", ones, None))
    texts = ["DistributedIterator end-of-data check on rank", "Strategy.reduce on rank"]
    _raises_naming(strategy, test_comm, call, lambda r: texts)


# -- MWMS_MPI_CHECK=callsite: the user's source line is agreed too ------------------------------


def _line() -> int:
    """The caller's line number."""
    return sys._getframe(1).f_lineno


@pytest.fixture(scope="module", params=[1, 2], ids=["site-k1", "site-k2"])
def sited(request: pytest.FixtureRequest) -> Iterator[Any]:
    """A strategy built with ``MWMS_MPI_CHECK=callsite`` (the mode is read at construction)."""
    mp = pytest.MonkeyPatch()
    mp.setenv("MWMS_MPI_CHECK", "callsite")
    try:
        resolver = MPIClusterResolver(num_accelerators={"CPU": request.param})
        s = ds.MultiWorkerMirroredStrategy(cluster_resolver=resolver)
    finally:
        mp.undo()
    yield s
    if s.extended.communicator is not None:
        s.extended.communicator.close()


def test_callsite_the_same_line_everywhere_agrees(sited: Any, test_comm: Any) -> None:
    n = sited.num_replicas_in_sync
    for _ in range(3):
        out = sited.reduce(
            "SUM", sited.run(lambda: np.full(2, replica_id(), np.float32)), axis=None
        )
        assert all_ranks_ok(test_comm, np.array_equal(out, np.full(2, n * (n - 1) / 2)))


def test_callsite_the_same_api_from_other_lines_raises_naming_both(
    sited: Any, test_comm: Any
) -> None:
    x = sited.run(lambda: np.ones(2, np.float32))
    odd = odd_rank()
    first = _line() + 2
    if odd:
        call = lambda: sited.reduce("SUM", x, axis=None)  # noqa: E731
    else:
        call = lambda: sited.reduce("SUM", x, axis=None)  # noqa: E731
    lines = [f"test_purpose_agreement.py:{first}", f"test_purpose_agreement.py:{first + 2}"]
    _raises_naming(sited, test_comm, call, lambda r: ["call site", *lines])


def test_callsite_in_a_replica_function_names_the_line_in_it(sited: Any, test_comm: Any) -> None:
    # With k = 2 the merge runs in the main thread; the line is the replica function's.
    odd = odd_rank()
    first = _line() + 5

    def fn() -> Any:
        ctx, x = ds.get_replica_context(), np.ones(2, np.float32)
        if odd:
            return ctx.all_reduce("SUM", x)
        return ctx.all_reduce("SUM", x)

    lines = [f"test_purpose_agreement.py:{first}", f"test_purpose_agreement.py:{first + 1}"]
    _raises_naming(sited, test_comm, lambda: sited.run(fn), lambda r: lines)


def test_callsite_raw_communicator_calls_name_their_lines(monkeypatch: Any, test_comm: Any) -> None:
    monkeypatch.setenv("MWMS_MPI_CHECK", "callsite")
    c = Communicator(name="sites")
    try:
        x = np.ones(3, np.float32)
        assert all_ranks_ok(test_comm, np.array_equal(c.all_reduce(x), x * c.size))
        if c.size == 1:
            return
        odd, first = odd_rank(), _line() + 3
        try:
            if odd:
                c.all_reduce(x)
            else:
                c.all_reduce(x)
            outcome = "returned without raising"
        except errors.InvalidArgumentError as exc:
            lines = [f"test_purpose_agreement.py:{first}", f"test_purpose_agreement.py:{first + 2}"]
            outcome = "" if all(t in str(exc) for t in lines) else str(exc)
        assert all_ranks_ok(test_comm, not outcome), outcome
    finally:
        c.close()


def test_other_modes_ignore_lines_while_a_callsite_communicator_lives(
    strategy: Any, sited: Any, test_comm: Any
) -> None:
    # `strategy` runs in the default mode: calls from different lines still agree there.
    x = strategy.run(lambda: np.ones(2, np.float32))
    if odd_rank():
        out = strategy.reduce("SUM", x, axis=None)
    else:
        out = strategy.reduce("SUM", x, axis=None)
    want = np.full(2, strategy.num_replicas_in_sync, np.float32)
    assert all_ranks_ok(test_comm, np.array_equal(out, want))


def test_ranks_that_disagree_about_callsite_refuse_to_build(monkeypatch: Any) -> None:
    if rank_size()[1] == 1:
        pytest.skip("a disagreement needs two ranks")
    monkeypatch.setenv("MWMS_MPI_CHECK", "callsite" if odd_rank() else "always")
    with pytest.raises(ValueError, match="ranks disagree about MWMS_MPI_CHECK"):
        Communicator(name="sites-modes")
