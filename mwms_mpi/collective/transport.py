"""Which transport moves a communicator's device (CuPy) arrays: decided once, by every rank alike.

A rank-local choice would send one rank into NCCL and another into an MPI ``Allreduce``, or one
into a chunked pipeline and another into one call, and both would hang. So when a communicator
is built, every rank contributes what it knows (:class:`DeviceFacts`: its GPU's PCI bus id and
host, whether NCCL loads, what its MPI says about CUDA, its tuning variables) to one
``allgather``, and every rank then runs the same pure function, :func:`decide`, on the same
facts: the same transport everywhere, or the same error everywhere. The choice then enters
every device call's agreed layout (``plans.py``).

The rule follows TF's ``CommunicationImplementation``:

* ``AUTO``: NCCL when every rank has a GPU of its own and NCCL loads everywhere; else CUDA-aware
  MPI when every rank's MPI is known to be CUDA-aware (``cuda_aware.py``); else staging.
* ``RING``: MPI: CUDA-aware if known on every rank, else staging.
* ``NCCL``: NCCL. Without a GPU on some rank: TF's warning, then ``RING``'s rule. Ranks that
  share a GPU (the same PCI bus id on one host) are an error naming them, found here, before
  NCCL starts (NCCL refuses two ranks on one device: docs/gpus.md, "Transports").

CUDA-aware MPI pays about 180 us a call for small device buffers (Intel MPI): buffers below
``min_device_bytes`` are staged instead. The rule reads only a call's agreed byte count, so every
rank takes the same path.
"""

from __future__ import annotations

import importlib.util
import warnings
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from mwms_mpi import _env
from mwms_mpi.collective.cuda_aware import cuda_support
from mwms_mpi.types import CommunicationImplementation

NCCL = "nccl"
CUDA_MPI = "cuda_mpi"
STAGING = "staging"
NCCL_WITHOUT_GPU = "Enabled NCCL communication but no GPUs detected/specified."  # TF's words

# Tuning, read on every rank and agreed (they decide which MPI calls a device buffer takes).
MIN_DEVICE_BYTES_ENV = "MWMS_MPI_CUDA_MPI_MIN_BYTES"
CHUNK_BYTES_ENV = "MWMS_MPI_STAGING_CHUNK_BYTES"
PIPELINE_BYTES_ENV = "MWMS_MPI_STAGING_PIPELINE_BYTES"
DEFAULT_MIN_DEVICE_BYTES = 32 << 20  # measured: staging wins below 16-64 MB (gpu_machine.md)
DEFAULT_CHUNK_BYTES = 4 << 20
DEFAULT_PIPELINE_BYTES = 16 << 20  # larger buffers are staged in chunks, copies overlapped


class DeviceFacts(NamedTuple):
    """What one rank contributes to the transport decision (picklable, small).

    Attributes:
      host: the rank's node (``MPI.Get_processor_name()``).
      gpu: the CUDA device this rank's device arrays use, or ``None`` (no GPU, or a CPU run).
      bus_id: that device's PCI bus id (the same in every process of the node), or ``None``.
      nccl: whether ``cupy.cuda.nccl`` loads.
      cuda_aware: whether this rank's MPI is known CUDA-aware (library or user).
      cuda_query: ``MPIX_Query_cuda_support()``'s answer, ``None`` without the symbol.
      tuning: ``(min_device_bytes, chunk_bytes, pipeline_bytes)``.
      error: what went wrong reading the facts ("" if nothing), so that every rank raises it.
    """

    host: str
    gpu: int | None
    bus_id: str | None
    nccl: bool
    cuda_aware: bool
    cuda_query: int | None
    tuning: tuple[int, int, int]
    error: str = ""


class Transport(NamedTuple):
    """The agreed transport of a communicator's device arrays.

    Attributes:
      name: ``"nccl"``, ``"cuda_mpi"`` or ``"staging"``.
      requested: the ``CommunicationImplementation`` it was decided for (after TF's NCCL
        fallback: ``RING``).
      reason: why, in words (shown by ``Communicator.describe()`` and logged once).
      warning: TF's warning when NCCL was asked for without GPUs, else ``""``.
      min_device_bytes: ``cuda_mpi``: smaller buffers are staged.
      chunk_bytes: staging: the size of one chunk of a pipelined buffer.
      pipeline_bytes: staging: buffers above this are cut in chunks.
    """

    name: str
    requested: str
    reason: str
    warning: str
    min_device_bytes: int
    chunk_bytes: int
    pipeline_bytes: int


def tuning_from_env(environ: Mapping[str, str] | None = None) -> tuple[int, int, int]:
    """``(min_device_bytes, chunk_bytes, pipeline_bytes)`` from their variables (or defaults).

    Raises:
      ValueError: naming the variable, unless each is a byte count (>= 1 for the chunk).
    """
    return (
        _env.env_int(
            MIN_DEVICE_BYTES_ENV, DEFAULT_MIN_DEVICE_BYTES, minimum=0, what="bytes", environ=environ
        ),
        _env.env_int(
            CHUNK_BYTES_ENV, DEFAULT_CHUNK_BYTES, minimum=1, what="bytes", environ=environ
        ),
        _env.env_int(
            PIPELINE_BYTES_ENV, DEFAULT_PIPELINE_BYTES, minimum=0, what="bytes", environ=environ
        ),
    )


def _device(requested: int | str | None) -> tuple[int | None, str | None, bool]:
    """(device, PCI bus id, NCCL loads) of this process; CUDA initialised, no context made."""
    if requested is None or importlib.util.find_spec("cupy") is None:
        return None, None, False
    try:
        import cupy

        if cupy.cuda.runtime.getDeviceCount() <= 0:
            return None, None, False
        gpu = cupy.cuda.runtime.getDevice() if requested == "current" else int(requested)
        bus_id = str(cupy.cuda.runtime.deviceGetPCIBusId(gpu)).upper()
    except Exception:  # no driver, no device: this rank has no GPU
        return None, None, False
    with warnings.catch_warnings():  # CuPy warns when libnccl is missing; the facts say so
        warnings.simplefilter("ignore")
        try:
            from cupy.cuda import nccl

            loads = bool(getattr(nccl, "available", True))
        except Exception:
            loads = False
    return gpu, bus_id, loads


def local_facts(
    MPI: Any, device: int | str | None = "current", environ: Mapping[str, str] | None = None
) -> DeviceFacts:
    """This rank's facts; never raises (an error is carried, so every rank raises it alike).

    Args:
      MPI: the ``mpi4py.MPI`` module.
      device: the CUDA device this communicator's device arrays live on, ``"current"`` for
        CuPy's current device (if CuPy and a GPU are there), or ``None`` for none (a strategy
        kept on the CPU).
      environ: where the tuning and ``MWMS_MPI_CUDA_AWARE`` are read (default ``os.environ``).
    """
    host = str(MPI.Get_processor_name())
    error = ""
    try:
        tuning = tuning_from_env(environ)
        support = cuda_support(MPI, environ)
    except ValueError as exc:  # carried: every rank raises it in decide()
        tuning, error = (0, 1, 0), str(exc)
        support = cuda_support(MPI, {})
    gpu, bus_id, nccl = _device(device)
    return DeviceFacts(host, gpu, bus_id, nccl, support.aware, support.query, tuning, error)


def shared_gpus(facts: Sequence[DeviceFacts]) -> list[tuple[str, str, list[int]]]:
    """Ranks that drive one physical GPU: ``(host, bus id, ranks)`` for each such GPU."""
    users: dict[tuple[str, str], list[int]] = {}
    for rank, f in enumerate(facts):
        if f.bus_id is not None:
            users.setdefault((f.host, f.bus_id), []).append(rank)
    return [(host, bus, ranks) for (host, bus), ranks in users.items() if len(ranks) > 1]


def _ranks(ranks: Sequence[int]) -> str:
    return ", ".join(str(r) for r in ranks)


def decide(requested: CommunicationImplementation | str, facts: Sequence[DeviceFacts]) -> Transport:
    """The transport for device arrays, from every rank's facts (in rank order).

    A pure function: every rank calls it on the same gathered facts and gets the same answer,
    or raises the same error.

    Raises:
      ValueError: NCCL asked for where ranks share a GPU or NCCL does not load; ranks whose
        tuning variables differ; a tuning variable that is not a byte count.
    """
    name = getattr(requested, "name", str(requested)).upper()
    errors = [(r, f.error) for r, f in enumerate(facts) if f.error]
    if errors:
        rank, text = errors[0]
        raise ValueError(f"transport: rank {rank}: {text}")
    tunings = {f.tuning for f in facts}
    if len(tunings) > 1:
        listing = "; ".join(f"rank {r}: {f.tuning}" for r, f in enumerate(facts))
        raise ValueError(
            f"transport: ranks set {MIN_DEVICE_BYTES_ENV}, {CHUNK_BYTES_ENV} and "
            f"{PIPELINE_BYTES_ENV} differently ({listing}); set them the same on every rank"
        )
    min_device, chunk, pipeline = facts[0].tuning
    without_gpu = [r for r, f in enumerate(facts) if f.gpu is None]
    shared = shared_gpus(facts)
    no_nccl = [r for r, f in enumerate(facts) if f.gpu is not None and not f.nccl]
    aware = all(f.cuda_aware for f in facts)

    def made(transport: str, reason: str, warning: str = "", asked: str = name) -> Transport:
        return Transport(transport, asked, reason, warning, min_device, chunk, pipeline)

    def ring(asked: str, warning: str = "") -> Transport:
        if aware:
            return made(CUDA_MPI, "every rank's MPI is CUDA-aware", warning, asked)
        unaware = [r for r, f in enumerate(facts) if not f.cuda_aware]
        why = f"the MPI of rank(s) {_ranks(unaware)} is not known to be CUDA-aware"
        return made(STAGING, why, warning, asked)

    if name == "NCCL":
        if without_gpu:
            return ring("RING", NCCL_WITHOUT_GPU)
        if shared:
            host, bus, ranks = shared[0]
            raise ValueError(
                f"CommunicationImplementation.NCCL: ranks {_ranks(ranks)} share one GPU (PCI bus "
                f"{bus} on host {host}), and NCCL refuses two ranks on one device. Give each "
                "rank its own GPU (CUDA_VISIBLE_DEVICES, srun --gpus-per-task=1) or use "
                "CommunicationImplementation.RING."
            )
        if no_nccl:
            raise ValueError(
                f"CommunicationImplementation.NCCL: NCCL does not load on rank(s) "
                f"{_ranks(no_nccl)} (cupy.cuda.nccl.available is False); install NCCL "
                "(nvidia-nccl-cu12/13) or use CommunicationImplementation.RING."
            )
        return made(NCCL, "asked for; every rank has a GPU of its own")
    if name == "AUTO":
        if not without_gpu and not shared and not no_nccl:
            return made(NCCL, "every rank has a GPU of its own and NCCL loads")
        if aware:
            return made(CUDA_MPI, _why_not_nccl(without_gpu, shared, no_nccl))
        return ring(name)
    return ring(name)


def _why_not_nccl(
    without_gpu: list[int], shared: list[tuple[str, str, list[int]]], no_nccl: list[int]
) -> str:
    if without_gpu:
        return f"not NCCL: no GPU on rank(s) {_ranks(without_gpu)}; every rank's MPI is CUDA-aware"
    if shared:
        return f"not NCCL: ranks {_ranks(shared[0][2])} share a GPU; every rank's MPI is CUDA-aware"
    return f"not NCCL: it does not load on rank(s) {_ranks(no_nccl)}; MPI is CUDA-aware"


def agree(
    comm: Any, MPI: Any, requested: CommunicationImplementation | str, device: int | str | None
) -> tuple[Transport, list[DeviceFacts]]:
    """Collective over ``comm``: gathers every rank's facts and decides (see :func:`decide`).

    Returns:
      The transport and every rank's facts (for ``describe()`` and the NCCL set-up).
    """
    facts = comm.allgather(local_facts(MPI, device))
    return decide(requested, facts), facts
