"""``mwms-mpi bench``: collective speed as ratios against raw mpi4py, measured in the same run.

Run: ``mpiexec -n 2 mwms-mpi bench [--quick] [--json-only] [--plot out.png]``.

Each measurement times one operation at a time, every rank starting together after a barrier,
and keeps the slowest rank's time (a collective is as slow as its last rank). Variants of the
same case alternate iteration by iteration, so drift in the machine hits them alike. Reported:
the median over iterations after warm-up, one JSON line per measurement, then a table of ratios.

Like is compared with like: ``raw`` gives MPI a preallocated output buffer (the strictest
baseline); our API returns a new result that the library never writes again, on recycled
memory whose previous result has been dropped (training's steady state: each result dropped
before the next call; docs/architecture.md, "Results are values"). Every call of ours is
agreed by every rank first (one 32-byte MAX all-reduce), so ``raw_pair`` is the honest
baseline for small messages: a raw 16-byte MAX ``Allreduce`` on a second communicator followed
by the data ``Allreduce``. ``check=first`` is the same call with
``MWMS_MPI_CHECK=first`` (agree a layout on first use only, unsafe): the cost of the agreement.
``timeline`` is the same call on a communicator recording ``MWMS_MPI_TIMELINE``: the cost of
the timeline when it is on (off, a communicator has no timeline code on its path at all).
``raw+alloc`` (a new output array per call, kept) and ``all_reduce(keep)`` (ours, every
result kept) are a program that keeps every result: nothing can be recycled, so both pay
fresh memory per call, and ``all_reduce(keep)`` is compared with ``raw+alloc``. They are
measured on their own, not interleaved with the others, because their page faults and cache
misses would slow whatever runs next. Raw outputs of 2 MB and more are on huge pages of their
own, as our results are. The hand-packed baseline pays for its own packing and unpacking.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

from mwms_mpi import _mpi
from mwms_mpi.collective import Communicator, host_memory, timeline
from mwms_mpi.collective.agreement import CHECK_ENV
from mwms_mpi.config.experimental import disable_op_determinism, enable_op_determinism
from mwms_mpi.distribute import MultiWorkerMirroredStrategy, ReduceOp
from mwms_mpi.types import CommunicationOptions

Case = dict[str, Callable[[], object]]
SIZES = (4 << 10, 64 << 10, 1 << 20, 16 << 20, 64 << 20)
STRATEGY_SIZES = (4 << 10, 1 << 20, 16 << 20, 64 << 20)
DETERMINISTIC_SIZES = (4 << 10, 1 << 20, 16 << 20)
KEPT_BYTES = 512 << 20  # per variant and rank, for the cases that keep every result


def _time_once(comm: Any, fn: Callable[[], object]) -> float:
    MPI = _mpi.mpi()
    comm.Barrier()
    start = time.perf_counter()
    fn()
    local = time.perf_counter() - start
    return float(comm.allreduce(local, op=MPI.MAX))


def measure(comm: Any, variants: Case, iters: int, warmup: int) -> dict[str, float]:
    """Median seconds per call of each variant, interleaved iteration by iteration.

    The order of the variants is reversed every other iteration: a call right after another
    variant's large call was measured up to 20% slower than one after its own kind, and
    alternating spreads that effect evenly instead of charging it to one variant.
    """
    samples: dict[str, list[float]] = {name: [] for name in variants}
    forward = list(variants.items())
    for i in range(warmup + iters):
        for name, fn in forward if i % 2 == 0 else forward[::-1]:
            t = _time_once(comm, fn)
            if i >= warmup:
                samples[name].append(t)
    return {name: statistics.median(s) for name, s in samples.items()}


def raw_cases(comm: Any, check: Any, x: np.ndarray) -> Case:
    """A raw data all-reduce, and the same preceded by a raw 16-byte agreement-sized call.

    Each writes into an output buffer of its own, as every variant of ours does: with one
    shared buffer, each raw call ran right after its twin had warmed the buffer in the cache,
    and a raw call into a buffer of its own measured 1.09-1.2x slower at 1 MB than that.
    """
    MPI = _mpi.mpi()
    # on huge pages of their own from 2 MB up, as our results are (host_memory.py): an output
    # glibc serves from heap memory touched before as 4 KB pages made a 16 MB raw call 1.2x
    # slower, and whether it did depended on what earlier cases had allocated and freed
    recv, pair_recv = host_memory.empty(x.shape, x.dtype), host_memory.empty(x.shape, x.dtype)
    flag, flags = np.zeros(2, dtype=np.int64), np.empty(2, dtype=np.int64)

    def raw_pair() -> None:
        check.Allreduce(flag, flags, MPI.MAX)
        comm.Allreduce(x, pair_recv, MPI.SUM)

    return {"raw": lambda: comm.Allreduce(x, recv, MPI.SUM), "raw_pair": raw_pair}


def single_array_cases(comm: Any, check: Any, ours: dict[str, Communicator], nbytes: int) -> Case:
    """Raw, raw pair, and ``all_reduce`` on each of our communicators (default, first, timed)."""
    x = np.ones(nbytes // 4, dtype=np.float32)
    cases = raw_cases(comm, check, x)
    for name, communicator in ours.items():
        cases[name] = _reducer(communicator, x)
    return cases


def _reducer(communicator: Communicator, x: np.ndarray) -> Callable[[], object]:
    return lambda: communicator.all_reduce(x)


def fresh_output_case(comm: Any, ours: Communicator, nbytes: int, kept: list[Any]) -> Case:
    """A program that keeps every result: a raw call into a new output each time and ours,
    both keeping what they get in ``kept`` (the caller empties it after the measurement), so
    that neither can reuse memory."""
    MPI = _mpi.mpi()
    x = np.ones(nbytes // 4, dtype=np.float32)

    def raw_alloc() -> None:
        out = np.empty_like(x)
        comm.Allreduce(x, out, MPI.SUM)
        kept.append(out)

    return {"raw+alloc": raw_alloc, "all_reduce(keep)": lambda: kept.append(ours.all_reduce(x))}


def packed_baseline(comm: Any, arrays: list[np.ndarray]) -> Callable[[], list[np.ndarray]]:
    """The hand-packed raw call: concatenate, one in-place ``Allreduce``, split."""
    MPI = _mpi.mpi()

    def raw_packed() -> list[np.ndarray]:
        buf = np.concatenate(arrays)
        comm.Allreduce(MPI.IN_PLACE, buf, MPI.SUM)
        return np.split(buf, len(arrays))

    return raw_packed


def batch_cases(comm: Any, ours: Communicator, count: int, nbytes: int) -> Case:
    MPI = _mpi.mpi()
    arrays = [np.full(nbytes // 4, i, dtype=np.float32) for i in range(count)]
    one_mb = CommunicationOptions(bytes_per_pack=1 << 20)

    def raw_each() -> list[np.ndarray]:
        out = []
        for a in arrays:
            r = np.empty_like(a)
            comm.Allreduce(a, r, MPI.SUM)
            out.append(r)
        return out

    return {
        "raw_packed": packed_baseline(comm, arrays),
        "raw_each": raw_each,
        "batch_all_reduce": lambda: ours.batch_all_reduce(arrays),
        "batch_all_reduce_1MB": lambda: ours.batch_all_reduce(arrays, options=one_mb),
    }


def strategy_cases(comm: Any, check: Any, strategy: Any, nbytes: int) -> Case:
    x = np.ones(nbytes // 4, dtype=np.float32)
    value = strategy.run(lambda: x)  # what a step function hands back (k = 1: the array itself)
    return {
        **raw_cases(comm, check, x),
        "strategy.reduce": lambda: strategy.reduce(ReduceOp.SUM, value, axis=None),
    }


def strategy_batch_cases(comm: Any, strategy: Any, count: int, nbytes: int) -> Case:
    arrays = [np.full(nbytes // 4, i, dtype=np.float32) for i in range(count)]
    values = [strategy.run(lambda a=a: a) for a in arrays]
    pairs = [(v, v) for v in values]
    batch = lambda: strategy.extended.batch_reduce_to(ReduceOp.SUM, pairs)  # noqa: E731
    return {
        "raw_packed": packed_baseline(comm, arrays),
        "batch_reduce_to": batch,
        "batch_reduce_to(deterministic)": deterministic(batch),
    }


def deterministic(fn: Callable[[], object]) -> Callable[[], object]:
    """``fn`` with op determinism on (exact-then-rounded float sums), off again after."""

    def run() -> object:
        enable_op_determinism()
        try:
            return fn()
        finally:
            disable_op_determinism()

    return run


def deterministic_cases(ours: Communicator, nbytes: int) -> Case:
    """The default (agreed) all_reduce against the same call with op determinism on."""
    x = np.random.default_rng(0).standard_normal(nbytes // 4).astype(np.float32)
    return {
        "all_reduce": lambda: ours.all_reduce(x),
        "all_reduce(deterministic)": deterministic(lambda: ours.all_reduce(x)),
    }


def _iters(nbytes: int, quick: bool) -> tuple[int, int]:
    """(iterations, warm-up) for one case: about 128 MB per variant, 20 to 2000 calls (fewer
    samples let one slow phase of a shared machine decide a 16 MB median)."""
    iters = max(20, min(2000, (1 << 30) // max(nbytes, 1) // 8))
    if quick:
        iters = max(5, iters // 10)
    return iters, max(3, iters // 10)


@contextmanager
def environment(env: dict[str, str]) -> Iterator[None]:
    """``env`` set in ``os.environ`` for the block, then restored (a communicator reads its
    modes and its transport's tuning when it is built)."""
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                del os.environ[k]
            else:
                os.environ[k] = v


def _communicator(name: str, env: dict[str, str]) -> Communicator:
    """A communicator built while ``env`` is set (the modes are read at construction)."""
    with environment(env):
        return Communicator(name=name)


def collect(quick: bool, emit: Callable[[dict[str, Any]], None]) -> list[dict[str, Any]]:
    """Runs every case on every rank; returns the rows (``emit`` sees each as it comes)."""
    MPI = _mpi.mpi()
    comm = MPI.COMM_WORLD.Dup()
    check = MPI.COMM_WORLD.Dup()
    size = comm.Get_size()
    scratch = comm.bcast(tempfile.mkdtemp(prefix="mwms-bench-") if comm.Get_rank() == 0 else None)
    ours = {
        "all_reduce": Communicator(),
        "all_reduce(check=first)": _communicator("first", {CHECK_ENV: "first"}),
        "all_reduce(timeline)": _communicator(
            "timed", {timeline.TIMELINE_ENV: os.path.join(scratch, "trace.json")}
        ),
    }
    rows: list[dict[str, Any]] = []

    def record(case: str, nbytes: int, timings: dict[str, float], baseline: str) -> None:
        pair = timings.get("raw_pair")
        for variant, seconds in timings.items():
            row = {
                "case": case,
                "bytes": nbytes,
                "ranks": size,
                "variant": variant,
                "median_us": round(seconds * 1e6, 2),
                "ratio": round(seconds / timings[baseline], 3),
                "baseline": baseline,
                "vs_pair": None if pair is None else round(seconds / pair, 3),
            }
            rows.append(row)
            emit(row)

    for nbytes in SIZES:
        iters, warmup = _iters(nbytes, quick)
        timings = measure(comm, single_array_cases(comm, check, ours, nbytes), iters, warmup)
        kept: list[Any] = []
        fresh = fresh_output_case(comm, ours["all_reduce"], nbytes, kept)
        keeps = max(3, min(iters, KEPT_BYTES // nbytes - warmup))  # what is kept stays bounded
        timings.update(measure(comm, fresh, keeps, warmup))
        kept.clear()
        record("all_reduce float32", nbytes, timings, "raw")
    for nbytes in DETERMINISTIC_SIZES:
        iters, warmup = _iters(nbytes, quick)
        timings = measure(comm, deterministic_cases(ours["all_reduce"], nbytes), iters, warmup)
        record("deterministic f32", nbytes, timings, "all_reduce")
    iters, warmup = _iters(200 * 4096, quick)
    timings = measure(comm, batch_cases(comm, ours["all_reduce"], 200, 4096), iters, warmup)
    record("200 x 4 KB float32", 200 * 4096, timings, "raw_packed")

    strategy = MultiWorkerMirroredStrategy()
    for nbytes in STRATEGY_SIZES:
        iters, warmup = _iters(nbytes, quick)
        timings = measure(comm, strategy_cases(comm, check, strategy, nbytes), iters, warmup)
        record("strategy.reduce f32", nbytes, timings, "raw")
    iters, warmup = _iters(200 * 4096, quick)
    timings = measure(comm, strategy_batch_cases(comm, strategy, 200, 4096), iters, warmup)
    record("batch_reduce_to 200x4KB", 200 * 4096, timings, "raw_packed")

    for communicator in ours.values():
        communicator.close()
    timeline.close()  # the timed communicator's trace: written, merged, then thrown away
    comm.Barrier()
    if comm.Get_rank() == 0:
        shutil.rmtree(scratch, ignore_errors=True)
    check.Free()
    comm.Free()
    return rows


def table(rows: list[dict[str, Any]]) -> str:
    """The rows as a text table, with each variant's ratio to its baseline."""
    MPI = _mpi.mpi()
    size = rows[0]["ranks"] if rows else 0
    lines = [f"\n{size} ranks, {MPI.Get_library_version().splitlines()[0]}; median per call"]
    width = max([24] + [len(r["variant"]) + 2 for r in rows])
    head = f"{'case':<24}{'bytes':>10}  {'variant':<{width}}{'median us':>11}{'ratio':>8}  vs"
    lines.append(head + f"{'vs raw_pair':>18}")
    for r in rows:
        pair = "" if r["vs_pair"] is None else r["vs_pair"]
        lines.append(
            f"{r['case']:<24}{r['bytes']:>10}  {r['variant']:<{width}}"
            f"{r['median_us']:>11}{r['ratio']:>8}  {r['baseline']:<12}{pair:>8}"
        )
    return "\n".join(lines)


def run(quick: bool = False, json_only: bool = False, plot: str | None = None) -> int:
    """The benchmark as a command: JSON records, then the table and the plot on rank 0."""
    rank = _mpi.world_rank()

    def emit(row: dict[str, Any]) -> None:
        if rank == 0:
            print(json.dumps(row), flush=True)

    rows = collect(quick, emit)
    if rank == 0 and not json_only:
        print(table(rows), flush=True)
    if rank == 0 and plot:
        from mwms_mpi.cli import plot as plotting

        library = _mpi.mpi().Get_library_version().replace("\x00", "").strip().splitlines()[0]
        plotting.ratios(rows, plot, library, time.strftime("%Y-%m-%d", time.gmtime()))
        print(f"plot: {plot}", flush=True)
    return 0
