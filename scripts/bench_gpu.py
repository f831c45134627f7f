"""GPU collectives: the strategy on CuPy arrays through each transport, against raw counterparts.

Run under the MPI to measure (2 ranks on the one GPU of the GPU machine; NCCL at 1 rank):

    mpiexec -n 2 python scripts/bench_gpu.py [--quick] [--max-bytes N] [--json out.json]

Per size (4 KB to 256 MB of float32), in one run, interleaved iteration by iteration and timed
as ``mwms-mpi bench`` times (every rank starts after a barrier; the slowest rank's time; the
median; the device synchronised before the clock stops):

* ``host``: raw mpi4py ``Allreduce`` of host arrays of the same bytes (the host-only collective);
* ``raw_device``: raw ``Allreduce`` on the device arrays (only where the MPI is CUDA-aware);
* ``raw_device_in_place``: the same in place (``MPI.IN_PLACE``: what ``cuda_mpi`` does with a
  packed batch, which all-reduces its pack buffer in place);
* ``raw_pipeline``: a pinned host buffer, 4 MB chunks copied asynchronously on one stream with
  an event each, each chunk reduced as soon as it landed and copied back on another stream
  (written here, independently of the package's staging backend);
* ``raw_nccl``: ``cupy.cuda.nccl`` ``allReduce`` (where NCCL can run: a GPU per rank);
* for each transport the package can take here (``staging``: the MPI's CUDA-awareness
  ignored; ``cuda_mpi``: every size by device pointers; ``auto``: the defaults; ``nccl``),
  ``reduce[t]``: ``strategy.reduce(SUM, x, axis=None)`` on a device array (with one rank, a
  ``Communicator.all_reduce``: a one-worker strategy moves nothing), and ``batch[t]``:
  ``extended.batch_reduce_to`` of the same bytes in 4 arrays (one pack, packed on the GPU).

Each row's ratio is to its raw counterpart (``raw_device`` for ``cuda_mpi``, ``raw_pipeline``
for ``staging``, ``raw_nccl`` for ``nccl``; for ``auto``, the faster of the package's own
``staging`` and ``cuda_mpi`` rows, or ``raw_nccl`` where AUTO took NCCL) and to ``host``.
The last lines name the measured size from which device pointers beat staging (the
``MWMS_MPI_CUDA_MPI_MIN_BYTES`` to use) and NCCL's per-call overhead at 1 MB.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from typing import Any

import cupy
import cupyx
import numpy as np

from mwms_mpi import _mpi
from mwms_mpi.cli.bench import _iters, environment, measure
from mwms_mpi.collective import Communicator, transport
from mwms_mpi.collective.cuda_aware import CUDA_AWARE_ENV, cuda_support
from mwms_mpi.distribute import MultiWorkerMirroredStrategy, ReduceOp
from mwms_mpi.types import CommunicationOptions

SIZES = (4 << 10, 64 << 10, 1 << 20, 16 << 20, 64 << 20, 256 << 20)
CHUNK = 4 << 20
BASELINE = {"staging": "raw_pipeline", "cuda_mpi": "raw_device", "nccl": "raw_nccl"}


def synced(fn: Callable[[], object]) -> Callable[[], object]:
    """``fn`` followed by a synchronisation of the device (NCCL returns before it is done)."""

    def run() -> object:
        out = fn()
        cupy.cuda.get_current_stream().synchronize()
        return out

    return run


def raw_pipeline(comm: Any, MPI: Any, x: Any, y: Any) -> Callable[[], object]:
    """The raw pinned 4 MB-chunk pipeline of ``x`` into ``y`` (reused buffers and streams)."""
    n = x.size
    host = cupyx.empty_pinned(n, np.float32)
    step = CHUNK // 4
    bounds = [(a, min(n, a + step)) for a in range(0, n, step)]
    down = cupy.cuda.Stream(non_blocking=True)
    up = cupy.cuda.Stream(non_blocking=True)

    def run() -> None:
        down.wait_event(cupy.cuda.get_current_stream().record())
        events = []
        for a, b in bounds:
            x[a:b].get(stream=down, out=host[a:b], blocking=False)
            events.append(down.record())
        for (a, b), event in zip(bounds, events, strict=True):
            event.synchronize()
            comm.Allreduce(MPI.IN_PLACE, host[a:b], MPI.SUM)
            y[a:b].set(host[a:b], stream=up)
        up.synchronize()

    return run


def nccl_comm(comm: Any) -> Any:
    """A raw NCCL communicator over ``comm``'s ranks (collective), or ``None`` if it cannot."""
    facts = comm.allgather(transport.local_facts(_mpi.mpi(), "current"))
    if not all(f.nccl for f in facts) or transport.shared_gpus(facts):
        return None
    from cupy.cuda import nccl

    uid = comm.bcast(nccl.get_unique_id() if comm.Get_rank() == 0 else None, root=0)
    return nccl.NcclCommunicator(comm.Get_size(), uid, comm.Get_rank())


def transports(size: int, aware: bool, nccl: bool) -> dict[str, tuple[dict[str, str], str]]:
    """The transports to measure here: name -> (environment, implementation)."""
    chosen = {"staging": ({CUDA_AWARE_ENV: "0"}, "RING")}
    if aware:
        chosen["cuda_mpi"] = ({transport.MIN_DEVICE_BYTES_ENV: "0"}, "RING")
    chosen["auto"] = ({}, "AUTO")
    if nccl:
        chosen["nccl"] = ({}, "NCCL")
    return chosen


class Ours:
    """The package's reduce and batch_reduce_to through one transport."""

    def __init__(self, name: str, env: dict[str, str], implementation: str, size: int) -> None:
        options = CommunicationOptions(implementation=implementation)
        self.name = name
        with environment(env):
            if size > 1:
                self.strategy: Any = MultiWorkerMirroredStrategy(communication_options=options)
                self.communicator = self.strategy.extended.communicator
            else:
                self.strategy = None
                self.communicator = Communicator(options=options, name=f"bench-{name}")
        self.transport = self.communicator.transport.name

    def reduce(self, x: Any) -> Callable[[], object]:
        if self.strategy is None:
            return synced(lambda: self.communicator.all_reduce(x))
        return synced(lambda: self.strategy.reduce(ReduceOp.SUM, x, axis=None))

    def batch(self, parts: list[Any]) -> Callable[[], object]:
        if self.strategy is None:
            return synced(lambda: self.communicator.batch_all_reduce(parts))
        pairs = [(p, p) for p in parts]
        return synced(lambda: self.strategy.extended.batch_reduce_to(ReduceOp.SUM, pairs))


def size_variants(
    comm: Any, MPI: Any, nbytes: int, aware: bool, raw_nccl: Any, ours: list[Ours]
) -> dict[str, Callable[[], object]]:
    """Every variant for ``nbytes`` of float32, on fresh arrays."""
    n = nbytes // 4
    rank = comm.Get_rank()
    hx, hy = np.full(n, rank + 1, np.float32), np.empty(n, np.float32)
    x, y = cupy.full(n, rank + 1, cupy.float32), cupy.empty(n, cupy.float32)
    parts = [x[i * (n // 4) : (i + 1) * (n // 4)] for i in range(4)]
    variants: dict[str, Callable[[], object]] = {
        "host": lambda: comm.Allreduce(hx, hy, MPI.SUM),
        "raw_pipeline": raw_pipeline(comm, MPI, x, y),
    }
    if aware:
        z = x.copy()
        variants["raw_device"] = synced(lambda: comm.Allreduce(x, y, MPI.SUM))
        variants["raw_device_in_place"] = synced(lambda: comm.Allreduce(MPI.IN_PLACE, z, MPI.SUM))
    if raw_nccl is not None:
        from cupy.cuda import nccl

        stream = cupy.cuda.get_current_stream()
        variants["raw_nccl"] = synced(
            lambda: raw_nccl.allReduce(
                x.data.ptr, y.data.ptr, n, nccl.NCCL_FLOAT32, nccl.NCCL_SUM, stream.ptr
            )
        )
    for o in ours:
        variants[f"reduce[{o.name}]"] = o.reduce(x)
        variants[f"batch[{o.name}]"] = o.batch(parts)
    return variants


def collect(
    quick: bool, min_bytes: int, max_bytes: int, emit: Callable[[dict[str, Any]], None]
) -> list[Any]:
    """Every size's timings, as rows (``emit`` sees each as it comes)."""
    MPI = _mpi.mpi()
    comm = MPI.COMM_WORLD.Dup()
    size = comm.Get_size()
    aware = all(comm.allgather(cuda_support(MPI).aware))
    raw_nccl = nccl_comm(comm)
    ours = [
        Ours(name, env, impl, size)
        for name, (env, impl) in transports(size, aware, raw_nccl is not None).items()
    ]
    rows: list[dict[str, Any]] = []
    for nbytes in [s for s in SIZES if min_bytes <= s <= max_bytes]:
        variants = size_variants(comm, MPI, nbytes, aware, raw_nccl, ours)
        iters, warmup = _iters(nbytes, quick)
        timings = measure(comm, variants, min(iters, 500), warmup)
        for variant, seconds in timings.items():
            row = _row(variant, nbytes, size, seconds, timings, ours)
            rows.append(row)
            emit(row)
        variants.clear()
        cupy.get_default_memory_pool().free_all_blocks()
    for o in ours:
        if o.strategy is None:
            o.communicator.close()
    comm.Free()
    return rows


def _row(
    variant: str, nbytes: int, size: int, seconds: float, timings: dict[str, float], ours: list
) -> dict[str, Any]:
    name = variant[variant.find("[") + 1 : -1] if "[" in variant else ""
    chosen = next((o.transport for o in ours if o.name == name), "")
    baseline = "raw_device" if variant == "raw_device_in_place" else BASELINE.get(chosen, "")
    if name == "auto" and chosen != "nccl":  # the target: within 1.1x of the faster transport
        kind = variant[: variant.find("[")]
        faster = [f"{kind}[{t}]" for t in ("staging", "cuda_mpi") if f"{kind}[{t}]" in timings]
        baseline = min(faster, key=timings.__getitem__)
    ratio = round(seconds / timings[baseline], 3) if baseline in timings else None
    return {
        "bytes": nbytes,
        "ranks": size,
        "variant": variant,
        "transport": chosen,
        "median_us": round(seconds * 1e6, 2),
        "baseline": baseline,
        "ratio": ratio,
        "vs_host": round(seconds / timings["host"], 3),
    }


def summary(rows: list[dict[str, Any]]) -> list[str]:
    """The measured crossover of device pointers over staging, and NCCL's overhead at 1 MB."""
    lines = []
    by = {(r["variant"], r["bytes"]): r["median_us"] for r in rows}
    sizes = sorted({r["bytes"] for r in rows})
    if any(v == "reduce[cuda_mpi]" for v, _ in by):
        wins = [s for s in sizes if by[("reduce[cuda_mpi]", s)] < by[("reduce[staging]", s)]]
        from_ = next((s for s in sizes if all(t in wins for t in sizes if t >= s)), None)
        lines.append(
            f"device pointers beat staging from {from_} bytes on: "
            f"{transport.MIN_DEVICE_BYTES_ENV}={from_} (default "
            f"{transport.DEFAULT_MIN_DEVICE_BYTES})"
            if from_ is not None
            else "device pointers never beat staging at every larger size"
        )
    if ("reduce[nccl]", 1 << 20) in by and ("raw_nccl", 1 << 20) in by:
        extra = by[("reduce[nccl]", 1 << 20)] - by[("raw_nccl", 1 << 20)]
        lines.append(f"NCCL per-call overhead at 1 MB: {extra:.1f} us over raw cupy.cuda.nccl")
    return lines


def table(rows: list[dict[str, Any]]) -> str:
    MPI = _mpi.mpi()
    size = rows[0]["ranks"] if rows else 0
    lines = [f"\n{size} ranks, {MPI.Get_library_version().splitlines()[0]}; median per call"]
    lines.append(
        f"{'bytes':>10}  {'variant':<18}{'transport':<10}{'median us':>12}"
        f"{'ratio':>8}  {'vs':<17}{'vs host':>8}"
    )
    for r in rows:
        ratio = "" if r["ratio"] is None else r["ratio"]
        lines.append(
            f"{r['bytes']:>10}  {r['variant']:<18}{r['transport']:<10}{r['median_us']:>12}"
            f"{ratio:>8}  {r['baseline']:<17}{r['vs_host']:>8}"
        )
    return "\n".join([*lines, *summary(rows)])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="few iterations (a smoke run)")
    parser.add_argument("--min-bytes", type=int, default=SIZES[0])
    parser.add_argument("--max-bytes", type=int, default=SIZES[-1])
    parser.add_argument("--json", default=None, help="write every row to this file (rank 0)")
    args = parser.parse_args(argv)
    rank = _mpi.world_rank()

    def emit(row: dict[str, Any]) -> None:
        if rank == 0:
            print(json.dumps(row), flush=True)

    rows = collect(args.quick, args.min_bytes, args.max_bytes, emit)
    if rank == 0:
        print(table(rows), flush=True)
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"rows": rows, "summary": summary(rows)}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
