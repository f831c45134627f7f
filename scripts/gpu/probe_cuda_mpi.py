"""What the ``cuda_mpi`` transport relies on, probed case by case on device pointers.

The CUDA-aware path hands CuPy buffers to MPI: in-place ``Allreduce`` (the gradient path),
every dtype a collective moves (float16, int8, complex, bool as uint8 ...), MAX/MIN, gathers and
broadcasts. Only float32/int64 SUM/MAX out of place were ever measured (docs/gpus.md). A device
pointer an MPI mishandles can kill the process, so each case is announced (a ``started`` line)
before it runs and its result written after; ``scripts/gpu/device_run.sh`` reruns the probe
after a crash, which then skips every case already announced, so a crash costs one case (marked
``crashed``), never the run.

Run under the MPI to probe (``mpiexec -n 2 python probe_cuda_mpi.py RESULTS.jsonl``); rank 0
appends one JSON object a line to RESULTS. Exit status 0 when the probe ran to its end (whatever
the cases found).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import cupy as cp
import numpy as np
from mpi4py import MPI

from mwms_mpi.collective.cuda_aware import cuda_support

COMM = MPI.COMM_WORLD
RANK, SIZE = COMM.Get_rank(), COMM.Get_size()
DTYPES = (
    "float32",
    "float64",
    "float16",
    "int8",
    "uint8",
    "int32",
    "int64",
    "complex64",
    "complex128",
)
COUNTS = (7, 1 << 18)  # an odd few elements, and 256 Ki elements (megabytes for most dtypes)


def data(dtype: str, n: int, rank: int) -> np.ndarray:
    """Rank ``rank``'s addends: small integers, exact in every dtype (float16 included)."""
    values = (np.arange(n) % 5 + rank + 1).astype(np.int64)
    out = values.astype(dtype)
    if np.dtype(dtype).kind == "c":
        out = out + 1j * (values % 3).astype(dtype)
    return out


def reference(dtype: str, n: int, op: str) -> np.ndarray:
    parts = np.stack([data(dtype, n, r) for r in range(SIZE)])
    if op == "SUM":
        return parts.sum(axis=0).astype(dtype)
    return (parts.max(axis=0) if op == "MAX" else parts.min(axis=0)).astype(dtype)


def allreduce(dtype: str, n: int, op: str, in_place: bool, nonblocking: bool) -> bool:
    x = cp.asarray(data(dtype, n, RANK))
    mpi_op = getattr(MPI, op)
    send: Any = MPI.IN_PLACE if in_place else x
    recv = x if in_place else cp.full_like(x, 99)
    cp.cuda.get_current_stream().synchronize()  # MPI reads the buffers outside CUDA's order
    if nonblocking:
        COMM.Iallreduce(send, recv, mpi_op).Wait()
    else:
        COMM.Allreduce(send, recv, mpi_op)
    ok = np.array_equal(cp.asnumpy(recv), reference(dtype, n, op))
    if not in_place:
        ok = ok and np.array_equal(cp.asnumpy(x), data(dtype, n, RANK))
    return ok


def allgatherv(dtype: str, n: int) -> bool:
    counts = [n + r for r in range(SIZE)]
    displs = [sum(counts[:r]) for r in range(SIZE)]
    x = cp.asarray(data(dtype, counts[RANK], RANK))
    recv = cp.full(sum(counts), 99, dtype=dtype)
    cp.cuda.get_current_stream().synchronize()
    COMM.Allgatherv(x, [recv, (counts, displs)])
    want = np.concatenate([data(dtype, counts[r], r) for r in range(SIZE)])
    return np.array_equal(cp.asnumpy(recv), want)


def bcast(dtype: str, n: int) -> bool:
    buf = cp.asarray(data(dtype, n, RANK))
    cp.cuda.get_current_stream().synchronize()
    COMM.Bcast(buf, root=SIZE - 1)
    return np.array_equal(cp.asnumpy(buf), data(dtype, n, SIZE - 1))


def cases() -> list[tuple[str, Callable[[], bool]]]:
    out: list[tuple[str, Callable[[], bool]]] = []
    for dtype in DTYPES:
        ops = ("SUM",) if np.dtype(dtype).kind == "c" else ("SUM", "MAX", "MIN")
        for n in COUNTS:
            for op in ops:
                for in_place in (True, False):
                    mode = "in_place" if in_place else "out_of_place"
                    out.append(
                        (
                            f"Allreduce {op} {dtype} n={n} {mode}",
                            lambda d=dtype, n=n, o=op, i=in_place: allreduce(d, n, o, i, False),
                        )
                    )
            out.append(
                (
                    f"Iallreduce SUM {dtype} n={n} in_place",
                    lambda d=dtype, n=n: allreduce(d, n, "SUM", True, True),
                )
            )
            out.append((f"Allgatherv {dtype} n={n}", lambda d=dtype, n=n: allgatherv(d, n)))
            out.append((f"Bcast {dtype} n={n}", lambda d=dtype, n=n: bcast(d, n)))
    return out


def main(results: Path) -> int:
    seen: set[str] = set()
    if results.exists():
        for line in results.read_text().splitlines():
            seen.add(json.loads(line)["case"])
    log = results.open("a") if RANK == 0 else None

    def write(record: dict[str, Any]) -> None:
        if log is not None:
            log.write(json.dumps(record) + "\n")
            log.flush()

    if "MPIX_Query_cuda_support" not in seen:
        write(
            {
                "case": "MPIX_Query_cuda_support",
                "value": cuda_support(MPI).query,
                "library": MPI.Get_library_version().splitlines()[0][:80],
                "size": SIZE,
            }
        )
    for name, run in cases():
        if name in seen:
            continue
        write({"case": name, "started": True})  # a crash inside leaves only this line
        COMM.Barrier()
        try:
            ok = bool(run())
            error = ""
        except Exception as exc:
            ok, error = False, f"{type(exc).__name__}: {exc}"[:300]
        everyone = COMM.allgather((ok, error))
        write(
            {
                "case": name,
                "ok": all(o for o, _ in everyone),
                "errors": sorted({e for _, e in everyone if e}),
            }
        )
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
