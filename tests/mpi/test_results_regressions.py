"""Issue 23, item 1: results of 2 MB and more were overwritten by the next call.

Each test is one program of the issue, as a user wrote it. Results of 2 MB and more were views
on a mapping that the buffer pool handed out again once the returned array itself was gone,
although the caller still held a numpy view of it (views keep only the mapping alive). Every
value is checked against a serial numpy reference on every rank (small integers, so float sums
are exact), and pass/fail is agreed across ranks before asserting.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from mwms_mpi import errors
from mwms_mpi.collective import Communicator, Op
from mwms_mpi.config.experimental import (
    disable_op_determinism,
    enable_op_determinism,
    is_op_determinism_enabled,
)
from mwms_mpi.types import ReduceOp
from tests.support.mpi import all_ranks_ok
from tests.support.reference import rank_array, reduce_reference
from tests.support.results import same

pytestmark = pytest.mark.mpi

MB4 = (1024, 1024)  # float32: 4 MB, over the 2 MB from which results lived on a mapping
LARGE = 600_000  # float32 elements: 2.4 MB


@pytest.fixture(scope="module")
def comm() -> Iterator[Communicator]:
    c = Communicator(name="results-regressions")
    yield c
    c.close()


@pytest.fixture
def deterministic(request: pytest.FixtureRequest) -> Iterator[bool]:
    """Op determinism as the test's parameter says, on every rank; off again afterwards."""
    if request.param:
        enable_op_determinism()
    try:
        yield is_op_determinism_enabled()
    finally:
        disable_op_determinism()


def _everyone(comm: Communicator, shape: tuple[int, ...], dtype: str, seed: int) -> list:
    return [rank_array(shape, dtype, r, seed) for r in range(comm.size)]


def _still_works(comm: Communicator) -> list[str]:
    """A refused call left the communicator usable: the next one sums correctly."""
    x = np.ones(4, np.float32)
    if same(comm.all_reduce(x), np.full(4, comm.size, np.float32)):
        return []
    return ["the communicator does not work afterwards"]


def _agree(test_comm: Any, rank: int, failures: list[str]) -> None:
    assert all_ranks_ok(test_comm, not failures), f"rank {rank}: {failures}"


def _replica_values(strategy: Any, shape: tuple[int, ...], dtype: str, seed: int) -> Any:
    """A PerReplica value (a plain array for one replica): global replica g holds data of g."""
    return strategy.experimental_distribute_values_from_function(
        lambda ctx: rank_array(shape, dtype, ctx.replica_id_in_sync_group, seed)
    )


def _replica_sum(strategy: Any, shape: tuple[int, ...], dtype: str, seed: int) -> np.ndarray:
    n = strategy.num_replicas_in_sync
    return reduce_reference(Op.SUM, [rank_array(shape, dtype, g, seed) for g in range(n)])


def _local(strategy: Any, value: Any) -> tuple[np.ndarray, ...]:
    return tuple(strategy.experimental_local_results(value))


# -- Communicator.all_reduce ---------------------------------------------------------------


def test_a_reshaped_all_reduce_result_survives_the_next_call(
    comm: Communicator, test_comm: Any
) -> None:
    """``first = comm.all_reduce(x).reshape(1024, 1024)`` changed at the next call."""
    xs = _everyone(comm, (MB4[0] * MB4[1],), "float32", 1)
    ys = _everyone(comm, (MB4[0] * MB4[1],), "float32", 2)
    first = comm.all_reduce(xs[comm.rank]).reshape(*MB4)
    second = comm.all_reduce(ys[comm.rank])
    failures = []
    if not same(first, reduce_reference(Op.SUM, xs).reshape(*MB4)):
        failures.append("first changed at the second call")
    if not same(second, reduce_reference(Op.SUM, ys)):
        failures.append("second is wrong")
    _agree(test_comm, comm.rank, failures)


def test_feeding_a_result_back_in_three_times(comm: Communicator, test_comm: Any) -> None:
    """``w = comm.all_reduce(w.reshape(-1)).reshape(...)`` failed on its second call with MPI's
    "Buffers must not be aliased" and left the communicator unusable."""
    w = rank_array(MB4, "float32", comm.rank, 3)
    want = reduce_reference(Op.SUM, _everyone(comm, MB4, "float32", 3))
    failures = []
    try:
        for step in range(3):
            w = comm.all_reduce(w.reshape(-1)).reshape(*MB4)
            if not same(w, want):
                failures.append(f"call {step + 1} gave wrong values")
            want = want * np.float32(comm.size)
    except Exception as exc:  # the same error on every rank (MPI's argument check)
        failures.append(f"{type(exc).__name__}: {exc}")
    try:
        after = comm.all_reduce(np.ones(3, np.float32))
        if not same(after, np.full(3, comm.size, np.float32)):
            failures.append(f"the next call gave {after}")
    except Exception as exc:
        failures.append(f"the communicator is unusable after: {type(exc).__name__}: {exc}")
    _agree(test_comm, comm.rank, failures)


def test_an_input_that_views_an_earlier_result_is_not_written_by_the_call(
    comm: Communicator, test_comm: Any
) -> None:
    """An input that is a view of an earlier result was overwritten by the call itself."""
    xs = _everyone(comm, (MB4[0] * MB4[1],), "float32", 4)
    first = comm.all_reduce(xs[comm.rank])[::-1]  # the caller keeps only a view
    want_first = reduce_reference(Op.SUM, xs)[::-1]
    second = comm.all_reduce(first)  # that view is the next input (not contiguous)
    failures = []
    if not same(first, want_first):
        failures.append("the input (a view of the first result) was written by the call")
    if not same(second, want_first * np.float32(comm.size)):
        failures.append("the second result is wrong")
    _agree(test_comm, comm.rank, failures)


def test_batch_inputs_that_are_earlier_batch_results_are_not_written(
    comm: Communicator, test_comm: Any
) -> None:
    """A batch whose inputs are the previous batch's results (one 2.4 MB pack)."""
    shapes = [(LARGE,), (16,)]
    everyone = [_everyone(comm, s, "float32", 5 + i) for i, s in enumerate(shapes)]
    first = comm.batch_all_reduce([e[comm.rank] for e in everyone])
    want_first = [reduce_reference(Op.SUM, e) for e in everyone]
    second = comm.batch_all_reduce(first)
    failures = []
    for i, (f, s, w) in enumerate(zip(first, second, want_first, strict=True)):
        if not same(f, w):
            failures.append(f"first result {i} (an input of the second call) was written")
        if not same(s, w * np.float32(comm.size)):
            failures.append(f"second result {i} is wrong")
    _agree(test_comm, comm.rank, failures)


def test_all_reduce_writes_into_out_and_returns_it(comm: Communicator, test_comm: Any) -> None:
    """The one zero-copy path: ``Communicator.all_reduce(x, out=buf)`` fills the caller's
    ``buf`` and returns it; the library does not write it again afterwards."""
    failures = []
    for count in (16, LARGE):
        xs = _everyone(comm, (count,), "float32", 6)
        buf = np.full(count, -1, np.float32)
        try:
            got = comm.all_reduce(xs[comm.rank], out=buf)
            if got is not buf:
                failures.append(f"{count}: returned {type(got).__name__}, not buf")
            if not same(buf, reduce_reference(Op.SUM, xs)):
                failures.append(f"{count}: buf does not hold the sum")
            comm.all_reduce(_everyone(comm, (count,), "float32", 7)[comm.rank])
            if not same(buf, reduce_reference(Op.SUM, xs)):
                failures.append(f"{count}: buf changed at the next call")
        except TypeError as exc:  # raised before any collective, on every rank alike
            failures.append(f"{count}: {exc}")
    _agree(test_comm, comm.rank, failures)


@pytest.mark.parametrize(
    "deterministic", [False, True], ids=["default", "determinism"], indirect=True
)
def test_out_is_the_input_reduces_in_place(
    comm: Communicator, test_comm: Any, deterministic: bool
) -> None:
    failures = []
    for count in (16, LARGE):
        xs = _everyone(comm, (count,), "float32", 8)
        mine = xs[comm.rank].copy()
        if comm.all_reduce(mine, out=mine) is not mine:
            failures.append(f"{count}: out=x did not return x")
        if not same(mine, reduce_reference(Op.SUM, xs)):
            failures.append(f"{count}: x does not hold the sum")
    _agree(test_comm, comm.rank, failures)


def test_out_given_on_one_rank_only_is_refused_on_every_rank(
    comm: Communicator, test_comm: Any
) -> None:
    """Whether ``out`` is given is agreed, like every argument."""
    x = np.ones(4, np.float32)
    last = comm.size > 1 and comm.rank == comm.size - 1
    failures = []
    if comm.size > 1:
        try:
            comm.all_reduce(x, out=np.empty(4, np.float32) if last else None)
            failures.append("no error")
        except errors.InvalidArgumentError as exc:
            if "out" not in str(exc):
                failures.append(f"the error does not name out: {exc}")
    failures += _still_works(comm)
    _agree(test_comm, comm.rank, failures)


@pytest.mark.parametrize(
    ("make_out", "text"),
    [
        (lambda x: np.empty(5, np.float32), "out is float32"),
        (lambda x: np.empty(4, np.float64), "out is float64"),
        (lambda x: np.empty(8, np.float32)[::2], "C-contiguous"),
        (lambda x: x.reshape(4), "shares memory"),  # a view of the input, not the input
        (lambda x: [0.0] * 4, "kind"),
    ],
    ids=["shape", "dtype", "strided", "overlap", "list"],
)
def test_a_bad_out_on_one_rank_raises_there_and_everywhere(
    comm: Communicator, test_comm: Any, make_out: Any, text: str
) -> None:
    """A rank whose ``out`` is unusable raises ValueError; the others do not wait for it."""
    x = np.ones(4, np.float32)
    last = comm.rank == comm.size - 1
    out = make_out(x) if last else np.empty(4, np.float32)
    failures = []
    try:
        comm.all_reduce(x, out=out)
        failures.append("no error")
    except ValueError as exc:
        if not last or text not in str(exc):
            failures.append(f"ValueError on rank {comm.rank}: {exc}")
    except errors.InvalidArgumentError as exc:
        if last:
            failures.append(f"the rank with the bad out got {exc}")
    failures += _still_works(comm)
    _agree(test_comm, comm.rank, failures)


# -- the strategy ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "deterministic", [False, True], ids=["default", "determinism"], indirect=True
)
def test_summed_gradients_kept_from_step_one_survive_step_two(
    strategy: Any, test_comm: Any, deterministic: bool
) -> None:
    """The summed gradients a user keeps from step 1 of ``extended.batch_reduce_to`` changed
    at step 2 (with op determinism too); kept as ``np.asarray`` of each output."""
    shapes = [(LARGE,), (16,)]
    kept = []
    wants = []
    failures = []
    try:
        for step in range(2):
            grads = [
                _replica_values(strategy, s, "float32", 10 * step + i) for i, s in enumerate(shapes)
            ]
            summed = strategy.extended.batch_reduce_to(ReduceOp.SUM, [(g, g) for g in grads])
            kept.append([np.asarray(_local(strategy, s)[0]) for s in summed])
            wants.append(
                [_replica_sum(strategy, s, "float32", 10 * step + i) for i, s in enumerate(shapes)]
            )
            del grads, summed
    except Exception as exc:
        failures.append(f"{type(exc).__name__}: {exc}")
    for step, (got, want) in enumerate(zip(kept, wants, strict=True)):
        for i, (g, w) in enumerate(zip(got, want, strict=True)):
            if not same(g, w):
                failures.append(f"step {step + 1} gradient {i} (determinism {deterministic})")
    _agree(test_comm, test_comm.Get_rank(), failures)


def test_views_of_reduce_and_gather_results_survive_later_calls(
    strategy: Any, test_comm: Any
) -> None:
    """Views of ``strategy.reduce`` and ``strategy.gather`` results changed at later calls."""
    failures = []
    kept: list[tuple[str, np.ndarray, np.ndarray]] = []
    n = strategy.num_replicas_in_sync
    try:
        for step in range(2):
            value = _replica_values(strategy, (LARGE,), "float32", 20 + step)
            want = _replica_sum(strategy, (LARGE,), "float32", 20 + step)
            reduced = strategy.reduce("SUM", value, axis=None).reshape(600, 1000)
            kept.append((f"reduce {step + 1}, reshaped", reduced, want.reshape(600, 1000)))
            gathered = strategy.gather(value, axis=0)[::-1]
            everyone = [rank_array((LARGE,), "float32", g, 20 + step) for g in range(n)]
            want_gather = np.concatenate(everyone)[::-1]
            kept.append((f"gather {step + 1}, reversed", gathered, want_gather))
            del value, reduced, gathered
    except Exception as exc:
        failures.append(f"{type(exc).__name__}: {exc}")
    failures += [label for label, got, want in kept if not same(got, want)]
    _agree(test_comm, test_comm.Get_rank(), failures)
