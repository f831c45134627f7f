"""Every collective call is agreed: a divergence raises on every rank, whatever came before.

Each case warms the communicator up with matching calls, then one rank (the last) diverges.
Every rank must raise (``InvalidArgumentError``, or its own argument error on the rank that
found one) and get nothing back, on the blocking path and on the deadline path alike; the
communicator stays usable afterwards. A hypothesis test drives random call sequences in which
one rank diverges at a random step.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mwms_mpi import errors
from mwms_mpi.collective import Communicator, Op
from mwms_mpi.types import CommunicationOptions
from tests.support.mpi import all_ranks_ok
from tests.support.reference import rank_array, reduce_reference

pytestmark = [pytest.mark.mpi(min_size=2)]

PATHS = {"blocking": None, "deadline": CommunicationOptions(timeout_seconds=60)}


@pytest.fixture(scope="module", params=list(PATHS), ids=list(PATHS))
def comm(request: pytest.FixtureRequest) -> Iterator[Communicator]:
    # One communicator per path and module (MPICH runs out of context ids after ~2000 Dups).
    c = Communicator(name=f"agree-{request.param}", options=PATHS[request.param])
    yield c
    c.close()


def _odd(c: Communicator) -> bool:
    """The diverging rank: the last one, so that at 4 ranks three agree and one does not."""
    return c.rank == c.size - 1


def _ones(*shape: int, dtype: Any = np.float32) -> np.ndarray:
    return np.ones(shape, dtype=dtype)


# name -> (warm-up calls every rank makes, the diverging call, error text every rank shows)
Case = tuple[Callable[[Communicator], Any], Callable[[Communicator], Any], str]
CASES: dict[str, Case] = {
    "a layout seen once, new on one rank": (
        lambda c: c.all_reduce(_ones(41)),
        lambda c: c.all_reduce(_ones(40 if _odd(c) else 41)),
        "shape",
    ),
    "both layouts seen by every rank": (
        lambda c: (c.all_reduce(_ones(4)), c.all_reduce(_ones(3))),
        lambda c: c.all_reduce(_ones(3 if _odd(c) else 4)),
        "shape",
    ),
    "same bytes, another dtype": (
        lambda c: (c.all_reduce(_ones(2)), c.all_reduce(_ones(2, dtype=np.int32))),
        lambda c: c.all_reduce(_ones(2, dtype=np.int32 if _odd(c) else np.float32)),
        "dtype",
    ),
    "same bytes, another op": (
        lambda c: (c.all_reduce(_ones(2)), c.all_reduce(_ones(2), Op.MAX)),
        lambda c: c.all_reduce(_ones(2), Op.MAX if _odd(c) else Op.SUM),
        "op",
    ),
    "same bytes, another shape order": (
        lambda c: (c.all_reduce(_ones(2, 3)), c.all_reduce(_ones(3, 2))),
        lambda c: c.all_reduce(_ones(3, 2) if _odd(c) else _ones(2, 3)),
        "shape",
    ),
    "all_reduce against all_gather": (
        lambda c: (c.all_reduce(_ones(2)), c.all_gather(_ones(2))),
        lambda c: c.all_gather(_ones(2)) if _odd(c) else c.all_reduce(_ones(2)),
        "collective",
    ),
    "all_reduce against broadcast": (
        lambda c: c.broadcast(_ones(2)),
        lambda c: c.broadcast(_ones(2)) if _odd(c) else c.all_reduce(_ones(2)),
        "collective",
    ),
    "barrier against min_max": (
        lambda c: (c.barrier(), c.min_max(1)),
        lambda c: c.min_max(1) if _odd(c) else c.barrier(),
        "collective",
    ),
    "batch against single all_reduce": (
        lambda c: c.batch_all_reduce([_ones(2)]),
        lambda c: c.batch_all_reduce([_ones(2)]) if _odd(c) else c.all_reduce(_ones(2)),
        "collective",
    ),
    "batch with one array changed": (
        lambda c: c.batch_all_reduce([_ones(2), _ones(3)]),
        lambda c: c.batch_all_reduce([_ones(2), _ones(4 if _odd(c) else 3)]),
        "array 1: shape",
    ),
    "batch with another bytes_per_pack": (
        lambda c: c.batch_all_reduce([_ones(2), _ones(3)]),
        lambda c: c.batch_all_reduce(
            [_ones(2), _ones(3)], options=CommunicationOptions(bytes_per_pack=8 if _odd(c) else 0)
        ),
        "bytes_per_pack",
    ),
    "gather of another trailing shape": (
        lambda c: c.all_gather(_ones(1, 3)),
        lambda c: c.all_gather(_ones(1, 2 if _odd(c) else 3)),
        "shape",
    ),
    "min_max for another purpose": (
        lambda c: c.min_max(1, "end of data"),
        lambda c: c.min_max(1, "infinite dataset" if _odd(c) else "end of data"),
        "purpose",
    ),
    "a layout seen on each rank, not on the others": (
        lambda c: _caught(lambda: c.all_reduce(_ones(5 if _odd(c) else 6))),
        lambda c: c.all_reduce(_ones(5 if _odd(c) else 6)),
        "shape",
    ),
    "sparse gather of another trailing shape": (
        lambda c: c.all_gather_sparse(_ones(2, 3), np.arange(2)),
        lambda c: c.all_gather_sparse(_ones(2, 2 if _odd(c) else 3), np.arange(2)),
        "shape",
    ),
    "sparse gather against a dense gather": (
        lambda c: (c.all_gather(_ones(2, 3)), c.all_gather_sparse(_ones(2, 3), np.arange(2))),
        lambda c: (
            c.all_gather(_ones(2, 3)) if _odd(c) else c.all_gather_sparse(_ones(2, 3), np.arange(2))
        ),
        "collective",
    ),
    "local addends of another shape": (
        lambda c: c.all_reduce_addends([_ones(3), _ones(3)]),
        lambda c: c.all_reduce_addends([_ones(2 if _odd(c) else 3)] * 2),
        "shape",
    ),
    "local addends against a plain all_reduce": (
        lambda c: (c.all_reduce_addends([_ones(3)] * 2), c.all_reduce(_ones(3))),
        lambda c: c.all_reduce(_ones(3)) if _odd(c) else c.all_reduce_addends([_ones(3)] * 2),
        "local addends",
    ),
    "an empty batch against a batch": (
        lambda c: c.batch_all_reduce([]),
        lambda c: c.batch_all_reduce([] if _odd(c) else [_ones(2)]),
        "arrays",
    ),
}

# name -> (warm-up, the call: valid everywhere but on the last rank, that rank's error type)
LOCAL: dict[str, tuple[Callable[[Communicator], Any], Callable[[Communicator], Any], type]] = {
    "broadcast from a root outside the group": (
        lambda c: c.broadcast(_ones(2)),
        lambda c: c.broadcast(_ones(2), root=c.size + 3 if _odd(c) else 0),
        ValueError,
    ),
    "all_gather on an axis out of range": (
        lambda c: c.all_gather(_ones(2)),
        lambda c: c.all_gather(_ones(2), axis=3 if _odd(c) else 0),
        ValueError,
    ),
    "bool SUM on one rank": (
        lambda c: c.all_reduce(_ones(2, dtype=np.uint8)),
        lambda c: c.all_reduce(_ones(2, dtype=bool if _odd(c) else np.uint8)),
        errors.InvalidArgumentError,
    ),
    "an op given as a name nobody knows": (
        lambda c: c.all_reduce(_ones(2), "max"),
        lambda c: c.all_reduce(_ones(2), "MEAN" if _odd(c) else "max"),
        ValueError,
    ),
    "an object array to gather": (
        lambda c: c.all_gather(_ones(2)),
        lambda c: c.all_gather(np.array([{}, None], dtype=object) if _odd(c) else _ones(2)),
        errors.InvalidArgumentError,
    ),
    "a string array in a sparse gather": (
        lambda c: c.all_gather_sparse(_ones(2), np.arange(2)),
        lambda c: c.all_gather_sparse(np.array(["a", "b"]) if _odd(c) else _ones(2), np.arange(2)),
        errors.InvalidArgumentError,
    ),
    "a string array to gather": (
        lambda c: c.all_gather(_ones(2)),
        lambda c: c.all_gather(np.array(["a", "b"]) if _odd(c) else _ones(2)),
        errors.InvalidArgumentError,
    ),
    # User types checked up front (issue "One call protocol"): refused, never a deep error.
    "an axis that is not an integer": (
        lambda c: c.all_gather(_ones(2)),
        lambda c: c.all_gather(_ones(2), axis="0" if _odd(c) else 0),  # type: ignore[arg-type]
        TypeError,
    ),
    "options that are not CommunicationOptions": (
        lambda c: c.all_reduce(_ones(2)),
        lambda c: c.all_reduce(_ones(2), options={"timeout_seconds": 5} if _odd(c) else None),  # type: ignore[arg-type]
        TypeError,
    ),
    "a list where an array goes": (
        lambda c: c.all_reduce(_ones(2)),
        lambda c: c.all_reduce([1.0, 1.0] if _odd(c) else _ones(2)),
        TypeError,
    ),
    "a batch that is not a sequence": (
        lambda c: c.batch_all_reduce([_ones(2)]),
        lambda c: c.batch_all_reduce(7 if _odd(c) else [_ones(2)]),  # type: ignore[arg-type]
        TypeError,
    ),
    "a min_max value that is not an integer": (
        lambda c: c.min_max(1, "value"),
        lambda c: c.min_max(1.5 if _odd(c) else 1, "value"),  # type: ignore[arg-type]
        ValueError,
    ),
}


def test_a_bug_in_a_plan_step_surfaces_as_itself_unagreed(comm: Communicator) -> None:
    """An exception no explicit check marked (an AttributeError from a bug of the package) is
    never taken for the caller's bad argument: it surfaces as itself, nothing agreed."""
    before = comm.calls

    def buggy_plan(opts: Any, *_: Any) -> Any:
        return None.layout  # type: ignore[attr-defined]

    with pytest.raises(AttributeError):
        comm._calls.run("all_reduce", None, buggy_plan, lambda *_: None)
    assert comm.calls == before and comm._calls.busy is None
    _still_usable(comm)


def _caught(call: Callable[[], Any]) -> None:
    """Runs a call that every rank refuses (a mismatch), leaving each rank's layout seen."""
    with pytest.raises(errors.InvalidArgumentError):
        call()


def _still_usable(c: Communicator) -> None:
    x = rank_array((3,), "float64", c.rank)
    want = reduce_reference(Op.SUM, [rank_array((3,), "float64", r) for r in range(c.size)])
    np.testing.assert_array_equal(c.all_reduce(x), want)


@pytest.mark.parametrize("name", list(CASES))
def test_a_divergence_after_warm_up_raises_on_every_rank(comm: Communicator, name: str) -> None:
    warm, diverge, text = CASES[name]
    warm(comm)
    before = comm.calls
    with pytest.raises(errors.InvalidArgumentError) as info:
        diverge(comm)
    assert text in str(info.value), str(info.value)
    assert f"on rank {comm.rank}" in str(info.value)
    assert comm.calls == before + 1  # every rank numbered that call alike
    _still_usable(comm)


@pytest.mark.parametrize("name", list(LOCAL))
def test_a_local_argument_error_on_one_rank_reaches_every_rank(
    comm: Communicator, name: str
) -> None:
    warm, call, own_error = LOCAL[name]
    warm(comm)
    expected = own_error if _odd(comm) else errors.InvalidArgumentError
    with pytest.raises(expected) as info:
        call(comm)
    if not _odd(comm):
        assert f"on rank {comm.size - 1}" in str(info.value), str(info.value)
    _still_usable(comm)


def test_a_divergence_after_hundreds_of_matching_calls(comm: Communicator) -> None:
    x = _ones(8)
    for _ in range(300):
        comm.all_reduce(x)
    with pytest.raises(errors.InvalidArgumentError, match="shape"):
        comm.all_reduce(_ones(7) if _odd(comm) else x)
    _still_usable(comm)


def test_the_same_local_error_everywhere_is_raised_as_itself(comm: Communicator) -> None:
    with pytest.raises(ValueError, match="is not a rank of communicator"):
        comm.broadcast(_ones(2), root=-1)
    with pytest.raises(ValueError, match="below 2\\*\\*62"):
        comm.min_max(2**62)
    _still_usable(comm)


# -- random call sequences in which one rank diverges at a random step --------------------------

KINDS = ["all_reduce", "addends", "batch", "gather", "sparse", "broadcast", "barrier", "min_max"]
SHAPES = st.lists(st.integers(1, 3), min_size=1, max_size=2).map(tuple)
CALLS = st.tuples(st.sampled_from(KINDS), SHAPES, st.sampled_from(["float32", "int64"]))


def _conflicts(a: tuple[str, tuple[int, ...], str], b: tuple[str, tuple[int, ...], str]) -> bool:
    """Whether two ranks making calls ``a`` and ``b`` must be told (not every difference is a
    mismatch: barriers carry nothing, gathers may differ along axis 0, values may differ)."""
    if a[0] != b[0]:
        return True
    if a[0] in ("barrier", "min_max"):
        return False
    if a[2] != b[2]:
        return True
    if a[0] in ("gather", "sparse"):
        return a[1][1:] != b[1][1:]
    return a[1] != b[1]


def _make(c: Communicator, call: tuple[str, tuple[int, ...], str]) -> Any:
    kind, shape, dtype = call
    x = rank_array(shape, dtype, c.rank)
    if kind == "all_reduce":
        return c.all_reduce(x)
    if kind == "addends":
        return c.all_reduce_addends([x, x])
    if kind == "batch":
        return c.batch_all_reduce([x, x.ravel()])
    if kind == "gather":
        return c.all_gather(x)
    if kind == "sparse":
        return list(c.all_gather_sparse(x, np.arange(x.shape[0])))
    if kind == "broadcast":
        return c.broadcast(x, root=c.size - 1)
    if kind == "barrier":
        return c.barrier()
    return c.min_max(int(x.ravel()[0]))


def _reference(c: Communicator, call: tuple[str, tuple[int, ...], str]) -> Any:
    kind, shape, dtype = call
    everyone = [rank_array(shape, dtype, r) for r in range(c.size)]
    if kind == "all_reduce":
        return reduce_reference(Op.SUM, everyone)
    if kind == "addends":
        return reduce_reference(Op.SUM, everyone + everyone)
    if kind == "batch":
        total = reduce_reference(Op.SUM, everyone)
        return [total, total.ravel()]
    if kind == "gather":
        return np.concatenate(everyone)
    if kind == "sparse":
        rows = np.concatenate([np.arange(shape[0])] * c.size)
        return [np.concatenate(everyone), rows]
    if kind == "broadcast":
        return everyone[-1]
    if kind == "barrier":
        return None
    firsts = [int(e.ravel()[0]) for e in everyone]
    return (min(firsts), max(firsts))


def _same(got: Any, want: Any) -> bool:
    if isinstance(want, list):
        return len(got) == len(want) and all(_same(g, w) for g, w in zip(got, want, strict=True))
    if isinstance(want, np.ndarray):
        return got.shape == want.shape and got.dtype == want.dtype and np.array_equal(got, want)
    return bool(got == want)


@settings(max_examples=25)
@given(st.lists(CALLS, min_size=2, max_size=8), st.data())
def test_random_sequences_with_one_rank_diverging(
    comm: Communicator, test_comm: Any, calls: list, data: Any
) -> None:
    step = data.draw(st.integers(0, len(calls) - 1))
    other = data.draw(CALLS.filter(lambda c: _conflicts(c, calls[step])))
    outcomes = []
    for i, call in enumerate(calls):
        mine = other if i == step and _odd(comm) else call
        try:
            got = _make(comm, mine)
        except errors.InvalidArgumentError:
            outcomes.append(i == step)  # the diverging step, and only it, raises on every rank
        else:
            outcomes.append(i != step and _same(got, _reference(comm, call)))
    assert all_ranks_ok(test_comm, all(outcomes)), f"rank {comm.rank}: {outcomes}"


# -- the check mode and the launcher are agreed when a communicator is built -------------------


def test_ranks_that_disagree_about_the_check_mode_refuse_to_build(monkeypatch: Any) -> None:
    rank = Communicator(name="probe")
    odd = rank.rank == rank.size - 1
    rank.close()
    monkeypatch.setenv("MWMS_MPI_CHECK", "first" if odd else "always")
    with pytest.raises(ValueError, match="ranks disagree about MWMS_MPI_CHECK"):
        Communicator(name="modes")


def test_first_mode_agrees_a_layout_on_first_use_only(monkeypatch: Any) -> None:
    monkeypatch.setenv("MWMS_MPI_CHECK", "first")
    c = Communicator(name="first-mode")
    try:
        x = _ones(5)
        before = c.stats
        for _ in range(4):
            np.testing.assert_array_equal(c.all_reduce(x), x * c.size)
        c.barrier()  # a barrier and a value agreement are their own agreement, always
        assert c.min_max(c.rank) == (0, c.size - 1)
        assert c.stats.calls == before.calls + 6
        assert c.stats.agreements == before.agreements + 3
    finally:
        c.close()
