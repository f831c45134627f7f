"""Deterministic reductions under MPI: the independent IEEE-754 reference's bits, at any world size.

A fixed multiset of ``K`` addends is split over the ranks, ``K / size`` local addends each (the
N·k-constant setting). Every rank compares the result bit for bit with the exact sum of the
same ``K`` addends rounded once (``tests/support/ieee_reference.py``: integer arithmetic on the
bit patterns, IEEE-754's rules for NaN, infinities, -0 and overflow, exact.py's documented grid;
it imports nothing from mwms_mpi), so runs at 1, 2, 3 and 4 ranks all give the reference's bits.
A NaN matches any NaN (IEEE-754 leaves its sign and payload open); every other bit must agree.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mwms_mpi import errors
from mwms_mpi._config import switches
from mwms_mpi.collective import Communicator
from mwms_mpi.types import CommunicationOptions
from tests.support.ieee_reference import (
    known_deviations,
    reference_divide,
    reference_sum,
    same_values,
)
from tests.support.mpi import all_ranks_ok

pytestmark = pytest.mark.mpi

K = 12  # logical replicas: 12 = 1 x 12 = 2 x 6 = 3 x 4 = 4 x 3
DTYPES = ["float16", "float32", "float64", "complex64", "complex128"]


@pytest.fixture(scope="module")
def comm() -> Iterator[Communicator]:
    c = Communicator(name="deterministic")
    yield c
    c.close()


@pytest.fixture
def deterministic() -> Iterator[None]:
    """Op determinism on for one test, on every rank (each rank runs the same tests)."""
    switches.op_determinism = True
    try:
        yield
    finally:
        switches.op_determinism = False


def _global_addends(
    dtype: str, shape: tuple[int, ...], seed: int, count: int = K
) -> list[np.ndarray]:
    """``count`` (default K) adversarial addends: magnitudes over 2**+-40 (float16: +-8),
    cancellation, +-0; the first K are the same whatever ``count`` is."""
    rng = np.random.default_rng(seed)
    span = 8 if dtype == "float16" else 40
    out = []
    previous = None
    for i in range(count):
        x = rng.standard_normal((*shape, 2)) * 2.0 ** rng.integers(-span, span, (*shape, 2))
        if i % 4 == 3 and previous is not None:
            x = -previous  # exact cancellation of the previous addend
        previous = x
        value = x[..., 0] + 1j * x[..., 1] if dtype.startswith("complex") else x[..., 0]
        out.append(np.asarray(value).astype(dtype))
    return out


def _reference(addends: list[np.ndarray], divisor: int = 1) -> np.ndarray:
    """The K = ``len(addends)`` addends' exact sum (/ ``divisor``) rounded once, independently
    of mwms_mpi; a complex sum is two real ones (its real parts, its imaginary parts)."""
    first = addends[0]
    if first.dtype.kind == "c":
        out = np.empty(first.shape, dtype=first.dtype)
        out.real = _reference([a.real for a in addends], divisor)
        out.imag = _reference([a.imag for a in addends], divisor)
        return out
    r = len(addends)
    deviations = known_deviations(first.dtype, divisor, r)  # known bugs: see ieee_reference
    return reference_sum(addends, divisor, grid_addends=r, **deviations)


def _mine(comm: Communicator, addends: list[np.ndarray]) -> list[np.ndarray]:
    k = K // comm.size
    return addends[comm.rank * k : (comm.rank + 1) * k]


def _same_bits(got: Any, want: np.ndarray) -> bool:
    return same_values(np.asarray(got), want)


@pytest.mark.usefixtures("deterministic")
@settings(max_examples=20)
@given(
    st.sampled_from(DTYPES), st.lists(st.integers(0, 5), max_size=2).map(tuple), st.integers(0, 9)
)
def test_sums_of_local_addends_have_the_reference_bits(
    comm: Communicator, test_comm: Any, dtype: str, shape: tuple[int, ...], seed: int
) -> None:
    if K % comm.size:
        pytest.skip(f"{K} addends do not split over {comm.size} ranks")
    addends = _global_addends(dtype, shape, seed)
    got = comm.all_reduce_addends(_mine(comm, addends))
    mean = comm.all_reduce_addends(_mine(comm, addends), divisor=K)
    ok = _same_bits(got, _reference(addends)) and _same_bits(mean, _reference(addends, K))
    assert all_ranks_ok(test_comm, ok), f"rank {comm.rank}: {got} {mean}"


@pytest.mark.usefixtures("deterministic")
def test_a_batch_of_mixed_dtypes_has_the_reference_bits(comm: Communicator, test_comm: Any) -> None:
    if K % comm.size:
        pytest.skip(f"{K} addends do not split over {comm.size} ranks")
    per_replica = [
        [
            _global_addends("float32", (7,), 1)[i],
            _global_addends("float64", (2, 3), 2)[i],
            np.arange(5, dtype=np.int64) * i,
            _global_addends("complex64", (3,), 3)[i],
            _global_addends("float32", (0,), 4)[i],
        ]
        for i in range(K)
    ]
    # one rank's batch holds its local replicas' values, summed by the rank as exact addends is
    # not what batch_all_reduce does: each rank contributes one addend per array, so K = size
    mine = per_replica[comm.rank]
    got = comm.batch_all_reduce(mine)
    everyone = per_replica[: comm.size]
    ok = True
    for i, value in enumerate(got):
        column = [replica[i] for replica in everyone]
        want = (
            np.sum(column, axis=0, dtype=column[0].dtype)
            if column[0].dtype.kind == "i"
            else _reference(column)
        )
        ok = ok and _same_bits(value, want)
    assert all_ranks_ok(test_comm, ok), f"rank {comm.rank}: {got}"


@pytest.mark.mpi(min_size=2)
def test_ranks_that_disagree_about_determinism_raise(comm: Communicator) -> None:
    switches.op_determinism = comm.rank == comm.size - 1
    try:
        with pytest.raises(errors.InvalidArgumentError, match="deterministic"):
            comm.all_reduce(np.ones(3, dtype=np.float32))
    finally:
        switches.op_determinism = False
    np.testing.assert_array_equal(comm.all_reduce(np.ones(2)), [comm.size] * 2)  # still usable


@pytest.mark.mpi(min_size=2)
def test_ranks_that_disagree_about_determinism_when_building_a_communicator_raise(
    comm: Communicator,
) -> None:
    # Agreed at construction too: under MWMS_MPI_CHECK=first a call's layout is not agreed
    # again once seen, so a mode that differs from the start must not get that far.
    switches.op_determinism = comm.rank == 0
    try:
        with pytest.raises(errors.InvalidArgumentError, match="disagree about op determinism"):
            Communicator(name="det-construction")
    finally:
        switches.op_determinism = False
    np.testing.assert_array_equal(comm.all_reduce(np.ones(2)), [comm.size] * 2)  # still usable


@pytest.mark.usefixtures("deterministic")
def test_integers_and_max_are_unchanged_by_the_mode(comm: Communicator) -> None:
    ints = comm.all_reduce(np.arange(4, dtype=np.int32) + comm.rank)
    np.testing.assert_array_equal(ints, np.arange(4) * comm.size + sum(range(comm.size)))
    top = comm.all_reduce(np.full(3, float(comm.rank)), "max")
    np.testing.assert_array_equal(top, [comm.size - 1] * 3)


# -- the strategy: 12 logical replicas, k = 12 / size local replicas per worker ----------------


@pytest.fixture(scope="module")
def twelve_replicas() -> Iterator[Any]:
    from mwms_mpi._mpi import world_size
    from mwms_mpi.distribute import MultiWorkerMirroredStrategy
    from mwms_mpi.distribute.cluster_resolver import MPIClusterResolver

    size = world_size()
    if K % size:
        pytest.skip(f"{K} replicas do not split over {size} workers")
    resolver = MPIClusterResolver(num_accelerators={"CPU": K // size})
    yield MultiWorkerMirroredStrategy(cluster_resolver=resolver)


@pytest.mark.usefixtures("deterministic")
def test_the_strategy_reduces_twelve_replicas_to_the_same_bits_at_any_world_size(
    twelve_replicas: Any, test_comm: Any
) -> None:
    strategy = twelve_replicas
    assert strategy.num_replicas_in_sync == K
    weights = _global_addends("float32", (6,), 5)
    biases = _global_addends("float64", (2, 2), 6)

    def of(values: list[np.ndarray]) -> Any:
        return strategy.experimental_distribute_values_from_function(
            lambda ctx: values[ctx.replica_id_in_sync_group]
        )

    w, b = of(weights), of(biases)
    summed = strategy.reduce("sum", w, axis=None)
    mean = strategy.reduce("mean", w, axis=None)
    batch = strategy.extended.batch_reduce_to("mean", [(w, w), (b, b)])
    local = [np.asarray(x) for x in strategy.experimental_local_results(batch[1])]
    in_replica = strategy.experimental_local_results(
        strategy.run(
            lambda x: __import__("mwms_mpi").distribute.get_replica_context().all_reduce("sum", x),
            args=(b,),
        )
    )
    ok = (
        _same_bits(np.asarray(summed), _reference(weights))
        and _same_bits(np.asarray(mean), _reference(weights, K))
        and _same_bits(
            np.asarray(strategy.experimental_local_results(batch[0])[0]), _reference(weights, K)
        )
        and all(_same_bits(x, _reference(biases, K)) for x in local)
        and all(_same_bits(np.asarray(x), _reference(biases)) for x in in_replica)
    )
    assert all_ranks_ok(test_comm, ok), f"rank: {summed} {mean}"


@pytest.mark.usefixtures("deterministic")
def test_reduce_along_an_axis_reduce_to_and_sync_on_read_are_the_same_bits_at_any_world_size(
    twelve_replicas: Any, test_comm: Any
) -> None:
    # The paths the first strategy test leaves out. Along an axis, each replica first sums its
    # own rows (the same code on the same piece at any world size, as in TF), and those sums
    # are the addends; a MEAN along an axis then divides that one exact sum by the global
    # count, as TF's numerator / denominator does.
    from mwms_mpi import Variable, VariableAggregation, VariableSynchronization

    strategy = twelve_replicas
    rows = _global_addends("float32", (3, 5), 7)
    vectors = _global_addends("float64", (4,), 8)

    def of(values: list[np.ndarray]) -> Any:
        return strategy.experimental_distribute_values_from_function(
            lambda ctx: values[ctx.replica_id_in_sync_group]
        )

    r, v = of(rows), of(vectors)
    row_sums = [np.sum(x, axis=0) for x in rows]
    along_sum = strategy.reduce("sum", r, axis=0)
    along_mean = strategy.reduce("mean", r, axis=0)
    to_sum = strategy.extended.reduce_to("sum", v, destinations=v)
    to_mean = strategy.extended.reduce_to("mean", v, destinations=v)
    with strategy.scope():
        on_read = {
            aggregation: Variable(
                np.zeros(4),
                synchronization=VariableSynchronization.ON_READ,
                aggregation=aggregation,
            )
            for aggregation in (VariableAggregation.SUM, VariableAggregation.MEAN)
        }

    def write(x: np.ndarray) -> None:
        for var in on_read.values():
            var.assign(x)

    strategy.run(write, args=(v,))
    ok = (
        _same_bits(np.asarray(along_sum), _reference(row_sums))
        and _same_bits(along_mean, reference_divide(_reference(row_sums), 3 * K))
        and all(
            _same_bits(np.asarray(x), _reference(vectors))
            for x in strategy.experimental_local_results(to_sum)
        )
        and all(
            _same_bits(np.asarray(x), _reference(vectors, K))
            for x in strategy.experimental_local_results(to_mean)
        )
        and _same_bits(
            np.asarray(on_read[VariableAggregation.SUM].read_value()), _reference(vectors)
        )
        and _same_bits(
            np.asarray(on_read[VariableAggregation.MEAN].read_value()), _reference(vectors, K)
        )
    )
    assert all_ranks_ok(test_comm, ok), f"rank: {along_sum} {along_mean} {to_sum}"


def _stress_values(dtype: str) -> list[float]:
    """A dtype's extremes, subnormals, signed zeros, infinities and NaN, and plain values."""
    info = np.finfo(dtype)
    tiny = float(info.smallest_subnormal)
    return [
        0.0,
        -0.0,
        1.0,
        -1.0,
        float(info.max),
        -float(info.max),
        float(info.tiny),
        tiny,
        -tiny,
        3 * tiny,
        np.inf,
        -np.inf,
        np.nan,
        2.0 ** (info.maxexp // 2),
        1.5,
    ]


@pytest.mark.usefixtures("deterministic")
@settings(max_examples=15)
@given(st.sampled_from(["float16", "float32", "float64"]), st.data())
def test_extremes_subnormals_zeros_and_specials_have_the_reference_bits(
    comm: Communicator, test_comm: Any, dtype: str, data: Any
) -> None:
    if K % comm.size:
        pytest.skip(f"{K} addends do not split over {comm.size} ranks")
    element = st.sampled_from(_stress_values(dtype))
    with np.errstate(over="ignore"):
        addends = [
            np.array(data.draw(st.lists(element, min_size=6, max_size=6)), dtype=dtype)
            for _ in range(K)
        ]
    got = comm.all_reduce_addends(_mine(comm, addends))
    mean = comm.all_reduce_addends(_mine(comm, addends), divisor=K)
    ok = _same_bits(got, _reference(addends)) and _same_bits(mean, _reference(addends, K))
    assert all_ranks_ok(test_comm, ok), f"{got} {mean}"


def _ieee_cases(dtype: str) -> list[np.ndarray]:
    """K addends whose columns each pin one IEEE-754 rule, whatever ranks they are split over."""
    info = np.finfo(dtype)
    big, tiny = float(info.max), float(info.smallest_subnormal)
    columns = [
        [-0.0] * K,  # only -0: -0
        [-0.0] * (K - 1) + [0.0],  # a +0 among them (on the last rank): +0
        [1.5, -1.5] * (K // 2),  # x + (-x): +0
        [np.inf] + [1.0] * (K - 2) + [-np.inf],  # inf + -inf: NaN
        [2.0] * (K - 1) + [-np.inf],  # -inf
        [np.nan] + [np.inf] * (K - 1),  # NaN
        [big] * K,  # overflow at the one rounding: inf (and a MEAN: big)
        [big] * (K // 2) + [-big] * (K // 2 - 1) + [1.0],  # partial sums overflow; the sum: big
        [-big] * 2 + [big] + [-0.0] * (K - 3),  # -big, finite
        [-tiny] + [-0.0] * (K - 1),  # a MEAN underflows to -0
        [tiny, -0.0] * (K // 2),  # a MEAN: 6 tiny / 12, a tie between 0 and tiny: +0
    ]
    with np.errstate(over="ignore"):
        return [np.array(row, dtype=dtype) for row in zip(*columns, strict=True)]


@pytest.mark.usefixtures("deterministic")
@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
def test_signed_zeros_infinities_nan_and_overflow_follow_ieee_at_any_world_size(
    comm: Communicator, test_comm: Any, dtype: str
) -> None:
    if K % comm.size:
        pytest.skip(f"{K} addends do not split over {comm.size} ranks")
    addends = _ieee_cases(dtype)
    got = comm.all_reduce_addends(_mine(comm, addends))
    mean = comm.all_reduce_addends(_mine(comm, addends), divisor=K)
    ok = _same_bits(got, _reference(addends)) and _same_bits(mean, _reference(addends, K))
    assert all_ranks_ok(test_comm, ok), f"rank {comm.rank}: {got} {mean}"


@pytest.mark.usefixtures("deterministic")
@pytest.mark.parametrize("segment", [1, 5, 64])
@pytest.mark.parametrize("dtype", ["float16", "float32", "float64", "complex64"])
def test_a_sum_in_segments_has_the_whole_arrays_bits(
    comm: Communicator, test_comm: Any, monkeypatch: Any, dtype: str, segment: int
) -> None:
    # Large sums go segment by segment (deterministic.SEGMENT real elements at a time); the
    # reference sums the whole array at once. Special values sit in some segments only, so
    # segments with and without the special-value exchange meet in one call.
    from mwms_mpi.collective import deterministic

    if K % comm.size:
        pytest.skip(f"{K} addends do not split over {comm.size} ranks")
    monkeypatch.setattr(deterministic, "SEGMENT", segment)
    addends = _global_addends(dtype, (23,), 9)
    stress = _stress_values(np.empty(0, dtype=dtype).real.dtype.name)
    with np.errstate(over="ignore"):
        for i, a in enumerate(addends):
            a[11 + i % 3] = stress[i % len(stress)]
    got = comm.all_reduce_addends(_mine(comm, addends))
    mean = comm.all_reduce_addends(_mine(comm, addends), divisor=K)
    ok = _same_bits(got, _reference(addends)) and _same_bits(mean, _reference(addends, K))
    assert all_ranks_ok(test_comm, ok), f"rank {comm.rank}: {got}"


@pytest.mark.usefixtures("deterministic")
@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
@pytest.mark.parametrize("timeout", [None, 60.0])
def test_one_addend_per_rank_in_chunks_has_the_reference_bits(
    comm: Communicator,
    test_comm: Any,
    monkeypatch: Any,
    dtype: str,
    timeout: float | None,
) -> None:
    # k = 1, a step's one gradient per worker, takes the single-addend paths (float32 is
    # scaled in float32). 20000 elements in chunks of 4096 go through every chunk loop, and the
    # special values through the special lanes' exchange. With a timeout, the collectives are
    # nonblocking and polled.
    from mwms_mpi.collective import exact

    monkeypatch.setattr(exact, "CHUNK", 4096)
    addends = _global_addends(dtype, (20000,), 5, max(K, comm.size))[: comm.size]
    stress = _stress_values(dtype)
    with np.errstate(over="ignore"):
        for i, a in enumerate(addends):
            for j, value in enumerate(stress):
                a[4096 * (j % 5) + 3 * j + i] = value
    options = CommunicationOptions(timeout_seconds=timeout)
    got = comm.all_reduce(addends[comm.rank], options=options)
    assert all_ranks_ok(test_comm, _same_bits(got, _reference(addends))), f"{got}"
