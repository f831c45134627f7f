"""The NCCL double (``tests/support/fake_nccl.py``) and the package's NCCL routing through it.

The double stands in for NCCL on every CI run (``make test-gpu-fake``), so it must be able to
fail: these tests show that it moves other ranks' data, refuses what NCCL refuses, finds ranks
whose calls differ, keeps results off streams not ordered after the call, and catches a group
never ended, each on every rank (no hang). Then the package's NCCL backend is pinned to the
NCCL calls its documented routing makes (a dtype map, a staged dtype, an uneven gather as
grouped byte broadcasts). Under a real CuPy these tests do not apply and are skipped.
"""

from __future__ import annotations

import types
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest

from mwms_mpi.collective import Communicator, Op
from mwms_mpi.types import CommunicationOptions
from tests.gpu.conftest import FAKE, gpu_per_rank
from tests.support.mpi import all_ranks_ok
from tests.support.reference import rank_array, reduce_reference

pytestmark = [
    pytest.mark.mpi,
    pytest.mark.skipif(not FAKE, reason="tests the NCCL double of the fake CuPy"),
]


@pytest.fixture(scope="module")
def nccl_module(cp: types.ModuleType) -> types.ModuleType:
    module: types.ModuleType = cp.cuda.nccl
    return module


@pytest.fixture(scope="module")
def raw(cp: types.ModuleType, nccl_module: Any, test_comm: Any) -> Any:
    """An NCCL communicator of the double over every rank, made as the backend makes it."""
    uid = test_comm.bcast(nccl_module.get_unique_id() if test_comm.rank == 0 else None, root=0)
    return nccl_module.NcclCommunicator(test_comm.size, uid, test_comm.rank)


@pytest.fixture
def lenient(nccl_module: Any) -> Iterator[None]:
    """The double without its current-stream rule, to see its stream ordering alone."""
    from tests.support import fake_nccl

    fake_nccl.expect_current_stream = False
    try:
        yield
    finally:
        fake_nccl.expect_current_stream = True


def _raises(call: Callable[[], None], match: str) -> bool:
    """Whether ``call`` raised an error whose text has ``match``, on this rank."""
    try:
        call()
    except Exception as exc:
        return match in str(exc)
    return False


def test_the_double_moves_every_ranks_data(
    cp: types.ModuleType, nccl_module: Any, raw: Any, test_comm: Any
) -> None:
    everyone = [rank_array((50,), "int64", r, 1) for r in range(test_comm.size)]
    x = cp.asarray(everyone[test_comm.rank])
    y = cp.full(50, -7, dtype=cp.int64)
    gathered = cp.zeros(50 * test_comm.size, dtype=cp.int64)
    stream = cp.cuda.get_current_stream()
    raw.allReduce(
        x.data.ptr, y.data.ptr, 50, nccl_module.NCCL_INT64, nccl_module.NCCL_MIN, stream.ptr
    )
    raw.allGather(x.data.ptr, gathered.data.ptr, 50, nccl_module.NCCL_INT64, stream.ptr)
    ok = np.array_equal(cp.asnumpy(y), reduce_reference(Op.MIN, everyone))
    ok = ok and np.array_equal(cp.asnumpy(gathered), np.concatenate(everyone))
    assert all_ranks_ok(test_comm, ok)


def test_a_result_is_stale_on_a_stream_not_ordered_after_the_call(
    cp: types.ModuleType, nccl_module: Any, raw: Any, test_comm: Any, lenient: None
) -> None:
    """On a non-blocking stream, the result lands when the reader orders itself after it."""
    n = test_comm.size
    x = cp.ones(8, dtype=cp.float32)
    y = cp.full(8, -1.0, dtype=cp.float32)
    side = cp.cuda.Stream(non_blocking=True)
    raw.allReduce(
        x.data.ptr, y.data.ptr, 8, nccl_module.NCCL_FLOAT32, nccl_module.NCCL_SUM, side.ptr
    )
    stale = cp.asnumpy(y)  # the null stream: not ordered after the side stream
    cp.cuda.get_current_stream().wait_event(side.record())
    landed = cp.asnumpy(y)
    ok = bool((stale == -1).all()) and bool((landed == n).all())
    raw.allReduce(
        x.data.ptr, y.data.ptr, 8, nccl_module.NCCL_FLOAT32, nccl_module.NCCL_MAX, side.ptr
    )
    with side:
        ok = ok and bool((cp.asnumpy(y) == 1).all())  # read on the stream itself
    assert all_ranks_ok(test_comm, ok)


def test_another_stream_than_the_callers_is_refused(
    cp: types.ModuleType, nccl_module: Any, raw: Any, test_comm: Any
) -> None:
    x = cp.ones(4, dtype=cp.float32)
    side = cp.cuda.Stream(non_blocking=True)

    def call() -> None:
        raw.allReduce(
            x.data.ptr, x.data.ptr, 4, nccl_module.NCCL_FLOAT32, nccl_module.NCCL_SUM, side.ptr
        )

    assert all_ranks_ok(test_comm, _raises(call, "current stream"))


@pytest.mark.parametrize(
    "case",
    [
        "datatype",
        "op",
        "bool-datatype",
        "host-pointer",
        "past-the-allocation",
        "root",
        "dtype-mismatch",
        "complex-max",
        "partial-overlap",
    ],
)
def test_what_nccl_refuses_is_refused_on_every_rank(
    cp: types.ModuleType, nccl_module: Any, raw: Any, test_comm: Any, case: str
) -> None:
    m = nccl_module
    x = cp.arange(16, dtype=cp.float32)
    z = cp.zeros(8, dtype=cp.complex64)
    host = np.zeros(16, np.float32)
    s = cp.cuda.get_current_stream().ptr
    p = x.data.ptr
    calls: dict[str, tuple[Callable[[], None], str]] = {
        "datatype": (lambda: raw.allReduce(p, p, 16, 12, m.NCCL_SUM, s), "datatype"),
        "op": (lambda: raw.allReduce(p, p, 16, m.NCCL_FLOAT32, 9, s), "reduction op"),
        "bool-datatype": (lambda: raw.allReduce(p, p, 16, np.bool_, m.NCCL_MAX, s), "integer"),
        "host-pointer": (
            lambda: raw.allReduce(host.ctypes.data, p, 16, m.NCCL_FLOAT32, m.NCCL_SUM, s),
            "not in any device allocation",
        ),
        "past-the-allocation": (
            lambda: raw.allReduce(p, p, 17, m.NCCL_FLOAT32, m.NCCL_SUM, s),
            "past its allocation",
        ),
        "root": (lambda: raw.broadcast(p, p, 16, m.NCCL_FLOAT32, test_comm.size, s), "root"),
        "dtype-mismatch": (
            lambda: raw.allReduce(p, p, 8, m.NCCL_FLOAT64, m.NCCL_SUM, s),
            "float32 buffer",
        ),
        "complex-max": (
            lambda: raw.allReduce(z.data.ptr, z.data.ptr, 16, m.NCCL_FLOAT32, m.NCCL_MAX, s),
            "complex64 buffer",
        ),
        "partial-overlap": (
            lambda: raw.allReduce(p, p + 4, 8, m.NCCL_FLOAT32, m.NCCL_SUM, s),
            "overlap",
        ),
    }
    call, match = calls[case]
    before = len(raw.calls)
    ok = _raises(call, match) and len(raw.calls) == before
    assert all_ranks_ok(test_comm, ok)


def test_ranks_whose_calls_differ_fail_on_every_rank(
    cp: types.ModuleType, nccl_module: Any, raw: Any, test_comm: Any
) -> None:
    if test_comm.size == 1:
        pytest.skip("needs two ranks")
    m = nccl_module
    x = cp.ones(8, dtype=cp.float32)
    s = cp.cuda.get_current_stream().ptr
    count = 8 if test_comm.rank == 0 else 4  # rank 0's call differs from the others'

    def differ() -> None:
        raw.allReduce(x.data.ptr, x.data.ptr, count, m.NCCL_FLOAT32, m.NCCL_SUM, s)

    def one_fails() -> None:
        ptr = np.zeros(8, np.float32).ctypes.data if test_comm.rank == 1 else x.data.ptr
        raw.allReduce(ptr, x.data.ptr, 8, m.NCCL_FLOAT32, m.NCCL_SUM, s)

    ok = _raises(differ, "calls differ")
    ok = ok and _raises(one_fails, "not in any device allocation")
    assert all_ranks_ok(test_comm, ok)


def test_groups_run_at_their_end_and_one_never_ended_is_caught(
    cp: types.ModuleType, nccl_module: Any, raw: Any, test_comm: Any
) -> None:
    m = nccl_module
    everyone = [rank_array((6,), "uint8", r) for r in range(test_comm.size)]
    x = cp.asarray(everyone[test_comm.rank])
    out = cp.zeros(6 * test_comm.size, dtype=cp.uint8)
    s = cp.cuda.get_current_stream().ptr
    m.groupStart()
    for root in range(test_comm.size):
        target = out.data.ptr + 6 * root
        source = x.data.ptr if root == test_comm.rank else target
        raw.broadcast(source, target, 6, m.NCCL_UINT8, root, s)
    ok = _raises(lambda: cp.asnumpy(out), "groupStart() without groupEnd()")
    m.groupEnd()
    ok = ok and np.array_equal(cp.asnumpy(out), np.concatenate(everyone))
    ok = ok and _raises(m.groupEnd, "NCCL_ERROR_INVALID_USAGE")
    assert all_ranks_ok(test_comm, ok)


# -- the package's routing, through the double -----------------------------------------------


@pytest.fixture(scope="module")
def routed(cp: types.ModuleType) -> Iterator[Communicator]:
    with gpu_per_rank():
        c = Communicator(options=CommunicationOptions(implementation="NCCL"), name="routed")
    assert c.transport.name == "nccl"
    yield c
    c.close()


def _calls_of(routed: Communicator, cp: types.ModuleType, run: Callable[[], Any]) -> list[str]:
    """The NCCL calls ``run`` made on ``routed``'s NCCL communicator (made by its first call)."""
    from tests.support import fake_nccl

    before = {c.serial: len(c.calls) for c in fake_nccl.communicators()}
    run()
    made = [c for c in fake_nccl.communicators() if len(c.calls) > before.get(c.serial, 0)]
    return [str(call) for c in made for call in c.calls[before.get(c.serial, 0) :]]


def test_the_backend_makes_the_nccl_calls_its_routing_documents(
    cp: types.ModuleType, routed: Communicator, test_comm: Any
) -> None:
    n, rank = routed.size, routed.rank
    sizes = [r % 3 for r in range(n)]
    cases: list[tuple[Callable[[], Any], list[str]]] = [
        (
            lambda: routed.all_reduce(cp.ones((4, 5), cp.float32), Op.SUM),
            ["allReduce(count=20, NCCL_FLOAT32, NCCL_SUM)"],
        ),
        (
            lambda: routed.all_reduce(cp.ones(3, cp.float16), Op.MAX),
            ["allReduce(count=3, NCCL_FLOAT16, NCCL_MAX)"],
        ),
        (
            lambda: routed.all_reduce(cp.ones(6, cp.complex128), Op.SUM),
            ["allReduce(count=12, NCCL_FLOAT64, NCCL_SUM)"],
        ),
        (
            lambda: routed.all_reduce(cp.ones(7, cp.uint64), Op.MIN),
            ["allReduce(count=7, NCCL_UINT64, NCCL_MIN)"],
        ),
        (lambda: routed.all_reduce(cp.ones(5, cp.int16), Op.SUM), []),  # staged: no NCCL type
        (
            lambda: routed.all_gather(cp.ones(sizes[rank], cp.int32), 0),
            [f"broadcast(count={4 * k}, NCCL_UINT8, root={r})" for r, k in enumerate(sizes) if k],
        ),
        (
            lambda: routed.all_gather(cp.ones((2, 3), cp.float32), 0),
            ["allGather(count=24, NCCL_UINT8)"],  # equal counts: one call
        ),
        (
            lambda: routed.broadcast(cp.ones(9, cp.float64), n - 1),
            [f"broadcast(count=72, NCCL_UINT8, root={n - 1})"],
        ),
    ]
    problems = []
    for i, (run, want) in enumerate(cases):
        got = _calls_of(routed, cp, run)
        if got != want:
            problems.append(f"case {i}: {got} != {want}")
    assert all_ranks_ok(test_comm, not problems), problems


def test_the_backend_reduces_every_ranks_values(
    cp: types.ModuleType, routed: Communicator, test_comm: Any
) -> None:
    """Results are other ranks' numbers (the double's exchange is real), for each dtype map."""
    problems = []
    for dtype, op in [("float32", Op.SUM), ("int8", Op.MAX), ("complex64", Op.SUM)]:
        everyone = [rank_array((11, 2), dtype, r, 2) for r in range(routed.size)]
        got = cp.asnumpy(routed.all_reduce(cp.asarray(everyone[routed.rank]), op))
        if not np.array_equal(got, reduce_reference(op, everyone)):
            problems.append(f"{dtype} {op}: {got}")
    assert all_ranks_ok(test_comm, not problems), problems
