"""Which launcher started this process, read from its environment, and which GPU a rank should use.

Everything here is a pure function of an environment mapping (default ``os.environ``), so tests
pass plain dicts, and nothing here touches MPI. In-process ``MPI.COMM_WORLD`` is the ground truth
once MPI is up; these variables serve the checks made before or beside it (a size-1 world under a
launcher that started N processes, a rank's GPU before CUDA initialises).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping

from mwms_mpi import _env

# Open MPI (orterun / prterun).
OMPI_COMM_WORLD_RANK = "OMPI_COMM_WORLD_RANK"
OMPI_COMM_WORLD_SIZE = "OMPI_COMM_WORLD_SIZE"
OMPI_COMM_WORLD_LOCAL_RANK = "OMPI_COMM_WORLD_LOCAL_RANK"
OMPI_COMM_WORLD_LOCAL_SIZE = "OMPI_COMM_WORLD_LOCAL_SIZE"
# MPICH / Hydra / Intel MPI (also srun --mpi=pmi2).
PMI_RANK = "PMI_RANK"
PMI_SIZE = "PMI_SIZE"
MPI_LOCALRANKID = "MPI_LOCALRANKID"
MPI_LOCALNRANKS = "MPI_LOCALNRANKS"
# PMIx (srun --mpi=pmix, prterun); PMIx exports no size variable.
PMIX_RANK = "PMIX_RANK"
# Slurm job steps (srun). SLURM_NTASKS is not used for the size: a batch script running python
# directly sees the allocation's SLURM_NTASKS (and SLURM_PROCID=0) but no step variables.
SLURM_PROCID = "SLURM_PROCID"
SLURM_NTASKS = "SLURM_NTASKS"
SLURM_STEP_NUM_TASKS = "SLURM_STEP_NUM_TASKS"
SLURM_LOCALID = "SLURM_LOCALID"
# GPUs.
CUDA_VISIBLE_DEVICES = "CUDA_VISIBLE_DEVICES"

OPEN_MPI = "openmpi"
PMI = "pmi"
PMIX = "pmix"
SLURM = "slurm"


@dataclasses.dataclass(frozen=True)
class LauncherInfo:
    """What a launcher's environment variables say about this process.

    Attributes:
      name: `OPEN_MPI`, `PMI` (MPICH, Hydra, Intel MPI), `PMIX` or `SLURM`.
      rank: This process's rank among the processes the launcher started.
      size: How many processes the launcher started, or `None` if it does not say.
      local_rank: This process's rank among those on its node, or `None`.
      local_size: How many of them run on its node, or `None`.
      size_variable: The variable `size` was read from (for error messages), or `None`.
    """

    name: str
    rank: int
    size: int | None
    local_rank: int | None
    local_size: int | None
    size_variable: str | None = None


def _int(env: Mapping[str, str] | None, name: str, minimum: int) -> int | None:
    """The launcher's variable ``name``, or None if unset; set but not an integer >= ``minimum``
    (a blank one included: launchers never write one) is an error naming it."""
    value = _env.env_raw(name, env)
    return None if value is None else _env.parse_int(name, value, minimum=minimum)


def _rank(env: Mapping[str, str] | None, name: str) -> int | None:
    return _int(env, name, 0)


def _size(env: Mapping[str, str] | None, name: str) -> int | None:
    return _int(env, name, 1)


def _open_mpi(env: Mapping[str, str] | None) -> LauncherInfo | None:
    rank = _rank(env, OMPI_COMM_WORLD_RANK)
    if rank is None:
        return None
    return LauncherInfo(
        OPEN_MPI,
        rank,
        _size(env, OMPI_COMM_WORLD_SIZE),
        _rank(env, OMPI_COMM_WORLD_LOCAL_RANK),
        _size(env, OMPI_COMM_WORLD_LOCAL_SIZE),
        OMPI_COMM_WORLD_SIZE,
    )


def _pmi(env: Mapping[str, str] | None) -> LauncherInfo | None:
    rank = _rank(env, PMI_RANK)
    if rank is None:
        return None
    return LauncherInfo(
        PMI,
        rank,
        _size(env, PMI_SIZE),
        _rank(env, MPI_LOCALRANKID),
        _size(env, MPI_LOCALNRANKS),
        PMI_SIZE,
    )


def _pmix(env: Mapping[str, str] | None) -> LauncherInfo | None:
    rank = _rank(env, PMIX_RANK)
    if rank is None:
        return None
    return LauncherInfo(PMIX, rank, None, None, None, None)


def _slurm(env: Mapping[str, str] | None) -> LauncherInfo | None:
    rank, size = _rank(env, SLURM_PROCID), _size(env, SLURM_STEP_NUM_TASKS)
    if rank is None or size is None:
        return None
    # Slurm exports no node-local task count (SLURM_STEP_TASKS_PER_NODE is per node of the step).
    return LauncherInfo(SLURM, rank, size, _rank(env, SLURM_LOCALID), None, SLURM_STEP_NUM_TASKS)


# The fixed detection order: the first launcher whose rank variable is set wins.
DETECTORS: tuple[Callable[[Mapping[str, str] | None], LauncherInfo | None], ...] = (
    _open_mpi,
    _pmi,
    _pmix,
    _slurm,
)


def detect_launcher(env: Mapping[str, str] | None = None) -> LauncherInfo | None:
    """Returns what the first launcher found (Open MPI, PMI, PMIx, Slurm) says, else `None`.

    Args:
      env: The environment to read; defaults to `os.environ`.

    Returns:
      A `LauncherInfo`, or `None` when no launcher's variables are set (a plain
      `python script.py`).

    Raises:
      ValueError: If a launcher variable is set but is not an integer (>= 0 for a
        rank, >= 1 for a size).
    """
    for detector in DETECTORS:
        info = detector(env)
        if info is not None:
            return info
    return None


def sized_launcher(env: Mapping[str, str] | None = None) -> LauncherInfo | None:
    """Returns the first launcher (in detection order) whose variables give a size, else `None`."""
    for detector in DETECTORS:
        info = detector(env)
        if info is not None and info.size is not None:
            return info
    return None


def check_world_size(actual_size: int, env: Mapping[str, str] | None = None) -> None:
    """Raises if the launcher started several processes but the MPI world has size 1.

    That happens when the launcher and mpi4py's MPI library do not match (a
    foreign `mpiexec`, `srun --mpi=none`): each process starts its own
    one-rank world, and N copies of the job would silently train alone.

    Args:
      actual_size: The size of `MPI.COMM_WORLD`.
      env: The environment to read; defaults to `os.environ`.

    Raises:
      RuntimeError: If the launcher's variables give a size above 1 and
        `actual_size` is 1.
    """
    info = sized_launcher(env)
    if info is None or info.size is None or info.size <= 1 or actual_size != 1:
        return
    raise RuntimeError(
        f"The launcher started {info.size} processes ({info.size_variable}={info.size}, "
        f"this is rank {info.rank}), but this process's MPI world has size {actual_size}: "
        "the launcher does not match the MPI library mpi4py uses (a foreign mpiexec, or srun "
        "--mpi=none), so every process would run alone. Launch with the mpiexec of mpi4py's "
        "MPI library (see mpi4py.MPI.Get_library_version()) or with srun --mpi=pmi2/pmix."
    )


def visible_gpu_count(env: Mapping[str, str] | None = None) -> int | None:
    """Returns how many GPUs `CUDA_VISIBLE_DEVICES` makes visible, or `None` if it is unset.

    As CUDA does, the list ends at the first entry that is not a device index
    or a `GPU-`/`MIG-` UUID: "" , "-1" and "NoDevFiles" give 0. (So no value is
    an error here: CUDA's own reading is the rule, and it has none.)

    Args:
      env: The environment to read; defaults to `os.environ`.
    """
    value = _env.env_raw(CUDA_VISIBLE_DEVICES, env)
    if value is None:
        return None
    count = 0
    for entry in value.split(","):
        entry = entry.strip()
        if not (entry.isdigit() or entry.startswith(("GPU-", "MIG-"))):
            break
        count += 1
    return count


def gpus_per_rank(visible_gpus: int, local_size: int) -> int:
    """Returns k, the GPUs each of `local_size` ranks on a node drives: 1 each, or a share.

    One rank per GPU is the usual layout (k = 1, several ranks may share one
    GPU); with fewer ranks than GPUs each rank drives `visible_gpus //
    local_size` of them. 0 when there are no GPUs.
    """
    if visible_gpus <= 0:
        return 0
    return max(1, visible_gpus // max(1, local_size))


def local_gpu_ids(local_rank: int, local_size: int, visible_gpus: int) -> list[int]:
    """Returns the (visible) GPU indices the rank with node-local rank `local_rank` drives.

    With k = `gpus_per_rank(...)` = 1 that is `[local_rank % visible_gpus]`;
    with k > 1 it is the k consecutive GPUs starting at `local_rank * k`.

    Raises:
      ValueError: If there are no visible GPUs or `local_rank` is out of range.
    """
    if visible_gpus <= 0:
        raise ValueError(f"No visible GPUs for node-local rank {local_rank} (visible_gpus=0)")
    if not 0 <= local_rank < max(1, local_size):
        raise ValueError(f"Node-local rank {local_rank} is not in [0, {local_size})")
    k = gpus_per_rank(visible_gpus, local_size)
    if k == 1:
        return [local_rank % visible_gpus]
    return list(range(local_rank * k, (local_rank + 1) * k))


def gpu_for_rank(local_rank: int, visible_gpus: int) -> int:
    """Returns the GPU a rank should use: `node_local_rank % visible_gpus`.

    Raises:
      ValueError: If `visible_gpus` is not positive.
    """
    if visible_gpus <= 0:
        raise ValueError(f"No visible GPUs for node-local rank {local_rank} (visible_gpus=0)")
    return local_rank % visible_gpus
