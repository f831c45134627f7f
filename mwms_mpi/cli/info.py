"""``mwms-mpi info``: what this job's MPI, launcher and ranks are, in one table on rank 0.

The first thing to run when a job misbehaves: alone (a world of one), under ``mpiexec -n N``
or ``srun``. It builds the strategy a program would build (``MultiWorkerMirroredStrategy()``)
and shows what it found; an error there is shown in the table instead of ending the command.
Every rank reports; rank 0 prints. The per-rank exchange is one pickled ``allgather`` on a
duplicate of ``COMM_WORLD``.
"""

from __future__ import annotations

import importlib.util
import json
import platform
import socket
import sys
from typing import Any

import numpy as np

from mwms_mpi import _env, _mpi
from mwms_mpi.cli._version import version
from mwms_mpi.cluster import mpiexec
from mwms_mpi.cluster.launcher import CUDA_VISIBLE_DEVICES, detect_launcher
from mwms_mpi.collective import transport, ulfm
from mwms_mpi.collective.backends import default_backends, select
from mwms_mpi.collective.cuda_aware import cuda_support
from mwms_mpi.distribute import MultiWorkerMirroredStrategy

# Per launcher (as cluster/launcher.py names them): who it is and where its local rank is.
LAUNCHERS = {
    "openmpi": ("Open MPI (mpirun/prterun)", "OMPI_COMM_WORLD_LOCAL_RANK"),
    "pmi": ("PMI: MPICH or Intel MPI hydra, or srun --mpi=pmi2", "MPI_LOCALRANKID"),
    "pmix": ("PMIx: srun --mpi=pmix or prterun", "-"),
    "slurm": ("Slurm srun without an MPI plugin (srun --mpi=none?)", "SLURM_LOCALID"),
}
THREAD_LEVELS = ("SINGLE", "FUNNELED", "SERIALIZED", "MULTIPLE")


def library_facts(MPI: Any) -> dict[str, Any]:
    """The loaded MPI library: banner, standard version, path, thread level, CUDA-awareness.

    CUDA-awareness is ``MPIX_Query_cuda_support()`` of the loaded libmpi, the one query the
    collective layer's transport decision uses too (``collective/cuda_aware.py``); it is never
    found out by trying, which would crash the process.
    """
    banner = MPI.Get_library_version().replace("\x00", "").strip().splitlines()
    major, minor = MPI.Get_version()
    try:
        support = cuda_support(MPI)
        aware = support.describe()
    except ValueError as exc:  # MWMS_MPI_CUDA_AWARE is not a boolean: shown, as is the rest
        support, aware = cuda_support(MPI, {}), f"error: {exc}"
    return {
        "library": " ".join(banner[0].split()) if banner else "?",
        "standard": f"MPI {major}.{minor}",
        "path": support.library or "?",
        "thread_level": "MPI_THREAD_" + THREAD_LEVELS[MPI.Query_thread()],
        "cuda_aware": aware,
    }


def _gpu_facts() -> dict[str, str]:
    """Whether CuPy and its NCCL import (the transport of CuPy arrays is the strategy's)."""
    if importlib.util.find_spec("cupy") is None:
        return {"cupy": "not installed", "nccl": "not installed", "cupy_backend": "not installed"}
    try:
        import cupy

        facts = {"cupy": str(cupy.__version__)}
    except Exception as exc:  # a broken CUDA install: say so, do not fail the command
        return {"cupy": f"fails: {exc}"[:60], "nccl": "-", "cupy_backend": "-"}
    try:
        from cupy.cuda import nccl

        facts["nccl"] = ".".join(str(nccl.get_version()))
    except Exception as exc:
        facts["nccl"] = f"no ({type(exc).__name__})"
    return facts


def _cupy_transport(strategy: Any) -> str:
    """The transport the strategy's CuPy arrays take: its communicator's (agreed by every
    rank), or, for one worker, what this rank alone would decide."""
    communicator = strategy.extended.communicator
    if communicator is not None:
        return str(communicator.transport.name)
    try:
        facts = transport.local_facts(_mpi.mpi())
        return transport.decide("AUTO", [facts]).name
    except ValueError as exc:
        return f"error: {exc}"[:60]


def rank_facts(MPI: Any) -> dict[str, Any]:
    """This rank's row: where it runs, what the strategy made of it, which backends it has."""
    launcher = detect_launcher()
    row: dict[str, Any] = {
        "rank": MPI.COMM_WORLD.Get_rank(),
        "host": socket.gethostname(),
        "slurm_node": _env.env_raw("SLURMD_NODENAME") or "-",
        "launcher_local_rank": "-" if launcher is None else launcher.local_rank,
        "cuda_visible_devices": _env.env_raw(CUDA_VISIBLE_DEVICES) or "-",
        "numpy_backend": select(default_backends(MPI), np.empty(0)).name,
        "cuda_aware": library_facts(MPI)["cuda_aware"].split(",")[0],
        **_gpu_facts(),
    }
    try:
        strategy = MultiWorkerMirroredStrategy()
    except Exception as exc:
        row.update(task="-", replicas="-", devices=f"error: {type(exc).__name__}: {exc}")
        return row
    resolver = strategy.cluster_resolver
    devices = strategy.extended.worker_devices
    if row["cupy"] != "not installed":
        row["cupy_backend"] = _cupy_transport(strategy)
    row.update(
        task=f"{resolver.task_type}:{resolver.task_id}",
        replicas=len(devices),
        devices=" ".join(d.rsplit("/", 1)[-1].replace("device:", "") for d in devices),
        node_local=f"{getattr(resolver, 'node_local_rank', '?')}/"
        f"{getattr(resolver, 'node_local_size', '?')}",
    )
    return row


def job_facts(MPI: Any) -> dict[str, Any]:
    """What rank 0 sees of the whole job: MPI library, launcher, mpiexec, whether a lost rank
    can be survived (``collective/ulfm.py``), Slurm, versions."""
    facts = library_facts(MPI)
    launcher = detect_launcher()
    if launcher is None:
        facts["launcher"] = "none (a plain `python`: a world of one)"
    else:
        what, local = LAUNCHERS.get(launcher.name, (launcher.name, "-"))
        facts["launcher"] = f"{what}; node-local rank from ${local}"
    try:
        found = mpiexec.probe()
        facts["mpiexec"] = f"{found.path}: {found.family.name} ({found.version})"
        facts["abort"] = abort_report(found.family)
    except Exception as exc:  # none beside this Python: the job came from elsewhere (srun)
        facts["mpiexec"] = f"none found ({type(exc).__name__})"
        facts["abort"] = "as the launcher that started the job reports it (no mpiexec to ask)"
    facts["lost_rank"] = ulfm.describe(MPI)
    job = _env.env_raw("SLURM_JOB_ID")
    if job is not None:  # shown as Slurm wrote them (nothing here acts on them)

        def show(name: str, missing: str) -> str:
            value = _env.env_raw(name)
            return missing if value is None else value

        facts["slurm"] = (
            f"job {job}, step {show('SLURM_STEP_ID', '-')}, nodes "
            f"{show('SLURM_JOB_NODELIST', '?')}, tasks per node "
            f"{show('SLURM_TASKS_PER_NODE', '?')}, mpi {show('SLURM_MPI_TYPE', '-')}"
        )
    facts["versions"] = (
        f"mwms_mpi {version()}, mpi4py {_mpi4py_version()}, numpy {np.__version__}, "
        f"Python {platform.python_version()}"
    )
    return facts


def abort_report(family: mpiexec.Family) -> str:
    """How ``family``'s ``mpiexec`` reports a job this package aborts, in one line.

    A failed rank ends the job with ``MPI_Abort`` (``mwms_mpi.run``: status 1 for an uncaught
    exception), and each launcher family words that differently (the texts measured in
    ``cluster/mpiexec.py``). Shown so that a user reading a job's log knows which line is the
    abort and that the job's exit status is the aborting rank's, not a crash of the launcher:
    every family measured (MPICH and Intel MPI hydra, Open MPI prterun) exits with it.
    """
    return (
        f'{family.name}\'s mpiexec prints "{family.abort_text}" and exits with the aborting '
        "rank's status (mwms_mpi.run: 1 for an uncaught exception)"
    )


def _mpi4py_version() -> str:
    import mpi4py

    return str(mpi4py.__version__)


COLUMNS = (
    ("rank", "rank"),
    ("host", "host"),
    ("slurm_node", "Slurm node"),
    ("node_local", "local"),
    ("task", "task"),
    ("replicas", "replicas"),
    ("devices", "devices"),
    ("cuda_visible_devices", "CUDA_VISIBLE_DEVICES"),
    ("cuda_aware", "CUDA-aware"),
    ("cupy", "CuPy"),
    ("nccl", "NCCL"),
    ("numpy_backend", "numpy->"),
    ("cupy_backend", "cupy->"),
)


def render(job: dict[str, Any], rows: list[dict[str, Any]]) -> str:
    """The report: the job's facts, then one line per rank."""
    width = max(len(k) for k in job)
    lines = [f"mwms-mpi info: {len(rows)} rank{'s' if len(rows) != 1 else ''}"]
    lines += [f"  {key:<{width}}  {value}" for key, value in job.items()]
    table = [[title for _, title in COLUMNS]]
    table += [[str(row.get(key, "-")) for key, _ in COLUMNS] for row in rows]
    widths = [max(len(r[i]) for r in table) for i in range(len(COLUMNS))]
    lines.append("")
    for r in table:
        lines.append("  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip())
    return "\n".join(lines)


def main(as_json: bool = False) -> int:
    """Gathers every rank's facts; rank 0 prints them. Collective: run it on every rank."""
    MPI = _mpi.mpi()
    comm = MPI.COMM_WORLD.Dup()
    try:
        rows = comm.allgather(rank_facts(MPI))
        if comm.Get_rank() == 0:
            job = job_facts(MPI)
            text = json.dumps({"job": job, "ranks": rows}) if as_json else render(job, rows)
            print(text, flush=True)
    finally:
        comm.Free()
    sys.stdout.flush()
    return 0
