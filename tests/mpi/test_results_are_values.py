"""Property under MPI: results are values (docs/architecture.md, "Results are values").

Hypothesis draws a program: a sequence of calls over every collective API (the
``Communicator``'s ``all_reduce``, ``all_reduce_addends``, ``batch_all_reduce``,
``all_gather``, ``broadcast``; ``Strategy.reduce`` and ``gather``, ``extended.reduce_to`` and
``batch_reduce_to``, ``ReplicaContext.all_reduce`` in ``Strategy.run``), at sizes on both sides
of every pool threshold (16 elements, 64 KB, 2.4 MB and more: results of 2 MB and more lived on
a mapping that the pool handed out again), float32, float64 and int32, op determinism on or off.
The program keeps every result, or only numpy views of it (reshape, slices, ``[::-1]``,
``np.asarray``), feeds kept views back in as later inputs, and at the end every kept array must
still equal the same view of its serial numpy reference.

Rules for hypothesis under MPI (docs/architecture.md, "Testing"): the ``mwms-mpi`` profile
(derandomised, no example database, no deadline, health checks off) makes every rank draw the
same programs; each rank's data is a function of (program, step, replica or rank), never of a
rank-local draw;
pass/fail is agreed across ranks before asserting, so every rank fails, and shrinks, alike.
Communicators and strategies are made once per module. Values are small integers, so float
sums are exact in any order and compared exactly; a MEAN divides an exact sum once, as numpy
does in float64 (correctly rounded to float32 as well).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, NamedTuple

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

import mwms_mpi.distribute as ds
from mwms_mpi.collective import Communicator, Op
from mwms_mpi.config.experimental import disable_op_determinism, enable_op_determinism
from mwms_mpi.distribute.cluster_resolver import MPIClusterResolver
from mwms_mpi.types import CommunicationOptions, ReduceOp
from tests.support.mpi import all_ranks_ok
from tests.support.reference import rank_array, reduce_reference
from tests.support.results import VIEWS, Kept, same

pytestmark = pytest.mark.mpi

# Elements per size class: 64 B-128 B, 64 KB-128 KB, 2.4 MB-4.8 MB (the pool's mapped buffers
# start at 2 MB). A program makes at most MAX_LARGE fresh large calls (4 ranks share 2 cores);
# kept views of more than MAX_FEED elements are not fed back (gathers grow them).
SIZES = {"tiny": 16, "medium": 16_384, "large": 600_000}
MAX_LARGE = 2
MAX_FEED = 600_000
DTYPES = ("float32", "float64", "int32")
OPS = (Op.SUM, Op.MAX, Op.MIN)
COMM_APIS = ("all_reduce", "all_reduce_addends", "batch_all_reduce", "all_gather", "broadcast")
STRATEGY_APIS = ("reduce", "gather", "reduce_to", "batch_reduce_to", "replica_all_reduce")
ADDENDS = 2  # per rank, in all_reduce_addends


class Step(NamedTuple):
    """One call of a program.

    ``choice`` picks the API's variant (op, axis, root, divisor, pack size, local replicas);
    ``source`` is -1 for fresh data, else which kept view (modulo their number) is every
    rank's and replica's input; ``keeps`` are the views kept of each result ("whole" keeps
    the result itself, the others only a view).
    """

    api: str
    size: str
    dtype: str
    choice: int
    deterministic: bool
    source: int
    keeps: tuple[str, ...]


@st.composite
def programs(draw: Any) -> list[Step]:
    """1-5 steps over a palette of one or two (API, size, dtype): calls that repeat a layout
    are the ones that can hand a kept result's memory out again."""
    palette = draw(
        st.lists(
            st.tuples(
                st.sampled_from(COMM_APIS + STRATEGY_APIS),
                st.sampled_from(("tiny", "medium", "large", "large")),
                st.sampled_from(DTYPES),
            ),
            min_size=1,
            max_size=2,
        )
    )
    program = []
    for _ in range(draw(st.integers(1, 5))):
        api, size, dtype = draw(st.sampled_from(palette))
        program.append(
            Step(
                api,
                size,
                dtype,
                draw(st.integers(0, 7)),
                draw(st.booleans()),
                draw(st.sampled_from((-1, -1, 0, 1, 2))),
                tuple(
                    draw(
                        st.lists(st.sampled_from(tuple(VIEWS)), min_size=1, max_size=2, unique=True)
                    )
                ),
            )
        )
    return program


def _explicit(api: str, dtype: str, choice: int, det: bool, views: tuple[str, ...]) -> list:
    """A large result kept only as views, a second large call, then a kept view fed back in."""
    return [
        Step(api, "large", dtype, choice, det, -1, views),
        Step(api, "large", dtype, choice, det, -1, ("slice",)),
        Step(api, "large", dtype, choice, det, 0, ("whole", "reverse")),
    ]


@pytest.fixture(scope="module")
def comm() -> Iterator[Communicator]:
    c = Communicator(name="results-are-values")
    yield c
    c.close()


@pytest.fixture(scope="module")
def strategies() -> dict[int, Any]:
    """MultiWorkerMirroredStrategy with k = 1 and k = 2 CPU replicas per rank (on the CPU)."""
    return {
        k: ds.MultiWorkerMirroredStrategy(
            cluster_resolver=MPIClusterResolver(num_accelerators={"CPU": k})
        )
        for k in (1, 2)
    }


# -- serial references --------------------------------------------------------------------


def _mean(contributions: Sequence[np.ndarray], axes: tuple[int, ...], count: int) -> np.ndarray:
    total = np.stack(list(contributions)).sum(axis=axes, dtype=np.float64)
    return np.asarray(total / count).astype(contributions[0].dtype)


def _sum(contributions: Sequence[np.ndarray], axes: tuple[int, ...]) -> np.ndarray:
    stacked = np.stack(list(contributions))
    return np.asarray(stacked.sum(axis=axes, dtype=stacked.dtype))


# -- one call -----------------------------------------------------------------------------


class Call:
    """Runs one step on every rank; returns (label, result, reference) for each result array."""

    def __init__(self, comm: Communicator, strategies: dict[int, Any], step: Step, index: int):
        self.comm = comm
        self.strategies = strategies
        self.step = step
        self.seed = index + 1
        self.label = f"step {index} {step}"

    def fresh(self, shape: tuple[int, ...], who: int, salt: int = 0) -> np.ndarray:
        """Data of rank or replica ``who`` (every rank can make every other's)."""
        return rank_array(shape, self.step.dtype, who, self.seed + salt)

    def run(self, fed: tuple[np.ndarray, np.ndarray] | None, size: int) -> list:
        api = self.step.api
        if api in COMM_APIS:
            return getattr(self, api)(fed, size)
        return self.strategy_call(fed, size)

    # Communicator APIs: ``fed`` is (kept view, its reference) or None; ``size`` elements.

    def contributions(
        self, fed: tuple[np.ndarray, np.ndarray] | None, shape: tuple[int, ...]
    ) -> tuple[np.ndarray, list[np.ndarray]]:
        """This rank's input and every rank's reference input (a fed view: the same on all)."""
        if fed is not None:
            return fed[0], [fed[1]] * self.comm.size
        everyone = [self.fresh(shape, r) for r in range(self.comm.size)]
        return everyone[self.comm.rank], everyone

    def all_reduce(self, fed: Any, n: int) -> list:
        op = OPS[self.step.choice % 3]
        mine, everyone = self.contributions(fed, (n,))
        got = self.comm.all_reduce(mine, op)
        return [(self.label, got, reduce_reference(op, everyone))]

    def all_reduce_addends(self, fed: Any, n: int) -> list:
        op = OPS[self.step.choice % 3]
        total = self.comm.size * ADDENDS
        floats = (np.dtype(self.step.dtype) if fed is None else fed[1].dtype).kind == "f"
        divisor = total if op is Op.SUM and floats and self.step.choice >= 4 else 1
        if fed is not None:
            mine, everyone = [fed[0]] * ADDENDS, [fed[1]] * total
        else:
            everyone = [self.fresh((n,), who) for who in range(total)]
            mine = everyone[self.comm.rank * ADDENDS : (self.comm.rank + 1) * ADDENDS]
        got = self.comm.all_reduce_addends(mine, op, divisor=divisor)
        want = reduce_reference(op, everyone) if divisor == 1 else _mean(everyone, (0,), divisor)
        return [(self.label, got, want)]

    def batch_all_reduce(self, fed: Any, n: int) -> list:
        op = OPS[self.step.choice % 3]
        pack = 0 if self.step.choice < 4 else 4096
        size, rank = self.comm.size, self.comm.rank
        first, everyone = self.contributions(fed, (n,))
        extras = [
            [rank_array((16,), dtype, r, self.seed + 100 + i) for r in range(size)]
            for i, dtype in enumerate(("float32", "int32"))
        ]
        mine = [first, *(e[rank] for e in extras)]
        got = self.comm.batch_all_reduce(mine, op, CommunicationOptions(bytes_per_pack=pack))
        wants = [reduce_reference(op, e) for e in (everyone, *extras)]
        return [
            (f"{self.label} output {i}", g, w)
            for i, (g, w) in enumerate(zip(got, wants, strict=True))
        ]

    def all_gather(self, fed: Any, n: int) -> list:
        axis = -(self.step.choice % 2)  # 0 or -1
        mine, everyone = self.contributions(fed, (2, n // 2))
        got = self.comm.all_gather(mine, axis=axis)
        return [(self.label, got, np.concatenate(everyone, axis=axis))]

    def broadcast(self, fed: Any, n: int) -> list:
        root = self.step.choice % self.comm.size
        mine, everyone = self.contributions(fed, (n,))
        got = self.comm.broadcast(mine, root=root)
        return [(self.label, got, everyone[root])]

    # Strategy APIs: global replica g holds data of g (or the fed view).

    def strategy_call(self, fed: Any, n: int) -> list:
        step = self.step
        strategy = self.strategies[1 + (step.choice // 4) % 2]
        replicas = strategy.num_replicas_in_sync
        dtype = fed[1].dtype if fed is not None else np.dtype(step.dtype)
        mean = step.choice % 2 == 1 and dtype.kind == "f"
        op = ReduceOp.MEAN if mean else ReduceOp.SUM
        axis = 0 if step.api == "reduce" and (step.choice // 2) % 2 else None
        shape = (2, n) if axis == 0 else (n,)

        def make(salt: int, kind: str = "") -> tuple[Any, list[np.ndarray]]:
            if fed is not None and salt == 0:  # a new view object of it for each replica
                view = strategy.experimental_distribute_values_from_function(lambda c: fed[0][...])
                return view, [fed[1]] * replicas
            s, d = ((16,), "float32") if kind == "tiny" else (shape, dtype)
            everyone = [rank_array(s, d, g, self.seed + salt) for g in range(replicas)]
            value = strategy.experimental_distribute_values_from_function(
                lambda ctx: everyone[ctx.replica_id_in_sync_group]
            )
            return value, everyone

        def reference(everyone: list[np.ndarray], along: int | None = None) -> np.ndarray:
            axes = (0,) if along is None else (0, 1)
            if not mean:
                return _sum(everyone, axes)
            count = replicas * (everyone[0].shape[0] if along is not None else 1)
            return _mean(everyone, axes, count)

        local = strategy.experimental_local_results
        out = []
        if step.api == "reduce":
            value, everyone = make(0)
            got = strategy.reduce(op, value, axis=axis)
            out.append((self.label, got, reference(everyone, axis)))
        elif step.api == "gather":
            value, everyone = make(0)
            got = strategy.gather(value, axis=0)
            out.append((self.label, got, np.concatenate(everyone, axis=0)))
        elif step.api == "reduce_to":
            value, everyone = make(0)
            result = strategy.extended.reduce_to(op, value, destinations=value)
            want = reference(everyone)
            out += [(f"{self.label} replica {i}", r, want) for i, r in enumerate(local(result))]
        elif step.api == "batch_reduce_to":
            (a, ea), (b, eb) = make(0), make(1, "tiny")
            results = strategy.extended.batch_reduce_to(op, [(a, a), (b, b)])
            for j, (result, everyone) in enumerate(zip(results, (ea, eb), strict=True)):
                want = reference(everyone)
                out += [
                    (f"{self.label} output {j} replica {i}", r, want)
                    for i, r in enumerate(local(result))
                ]
        else:  # ReplicaContext.all_reduce of a nest, in Strategy.run
            (a, ea), (b, eb) = make(0), make(1, "tiny")

            def fn(x: Any, y: Any) -> Any:
                return ds.get_replica_context().all_reduce(op, {"a": x, "b": y})

            results = strategy.run(fn, args=(a, b))
            wants = {"a": reference(ea), "b": reference(eb)}
            for i, per_replica in enumerate(local(results)):
                out += [
                    (f"{self.label} replica {i} {key}", per_replica[key], wants[key])
                    for key in ("a", "b")
                ]
        return out


# -- the program --------------------------------------------------------------------------


def _feedable(kept: Kept) -> list[tuple[np.ndarray, np.ndarray]]:
    return [
        (got, want) for _, got, want in kept.entries if got.ndim >= 1 and 0 < got.size <= MAX_FEED
    ]


def _step(
    comm: Communicator, strategies: dict[int, Any], kept: Kept, step: Step, index: int, large: int
) -> tuple[list[str], bool]:
    """Runs one step and keeps its results' views; returns the results that were wrong when
    returned, and whether the step made a fresh large call."""
    feedable = _feedable(kept)
    fed = feedable[step.source % len(feedable)] if step.source >= 0 and feedable else None
    size = step.size if step.size != "large" or fed is not None or large < MAX_LARGE else "medium"
    if step.deterministic:
        enable_op_determinism()
    else:
        disable_op_determinism()
    call = Call(comm, strategies, step, index)
    wrong = []
    for label, got, want in call.run(fed, SIZES[size]):
        if not same(got, want):
            wrong.append(f"{label}: wrong when returned")
        kept.keep(label, got, want, step.keeps)
    return wrong, fed is None and size == "large"


@settings(max_examples=40)
@example([Step("all_reduce", "large", "float32", 0, False, -1, ("reshape", "reverse"))] * 2)
@example(_explicit("all_reduce", "float32", 0, False, ("reverse",)))
@example(_explicit("all_reduce", "float32", 0, False, ("flat",)))
@example(_explicit("all_reduce_addends", "float64", 4, True, ("slice",)))
@example(_explicit("batch_all_reduce", "float32", 0, True, ("reverse",)))
@example(_explicit("all_gather", "int32", 0, False, ("strided",)))
@example(_explicit("broadcast", "float64", 1, False, ("reverse",)))
@example(_explicit("reduce", "float32", 5, True, ("reverse",)))
@example(_explicit("reduce", "float32", 2, False, ("reshape",)))
@example(_explicit("gather", "float32", 0, False, ("reverse",)))
@example(_explicit("reduce_to", "float64", 5, True, ("slice",)))
@example(_explicit("batch_reduce_to", "float32", 0, True, ("asarray", "reverse")))
@example(_explicit("batch_reduce_to", "float32", 4, False, ("asarray", "reverse")))
@example(_explicit("replica_all_reduce", "float32", 4, False, ("reverse",)))
@given(programs())
def test_every_kept_result_and_view_equals_its_reference(
    comm: Communicator, strategies: dict[int, Any], test_comm: Any, program: list[Step]
) -> None:
    kept = Kept()
    failures: list[str] = []
    large = 0
    index = 0
    try:
        for index, step in enumerate(program):
            wrong, was_large = _step(comm, strategies, kept, step, index, large)
            failures += wrong
            large += was_large
    except Exception as exc:  # every rank makes the same calls, so raises alike
        failures.append(f"step {index} raised {type(exc).__name__}: {exc}")
    finally:
        disable_op_determinism()
    failures += [f"{label}: changed after it was returned" for label in kept.mismatches()]
    assert all_ranks_ok(test_comm, not failures), f"rank {comm.rank}: " + "\n".join(failures)
