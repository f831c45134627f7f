"""SlurmClusterResolver: TF's resolver for srun job steps, without its host-order and CPU-only bugs.

Reads only environment variables (never ``scontrol``): the hostlist and tasks-per-node
expressions are expanded here in pure Python.
"""

from __future__ import annotations

import itertools
import math
import operator
import os
import re
import shutil
import subprocess
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from mwms_mpi import _env
from mwms_mpi.cluster.launcher import CUDA_VISIBLE_DEVICES, visible_gpu_count
from mwms_mpi.cluster.resolver import ClusterResolver, format_master_url
from mwms_mpi.cluster.spec import ClusterSpec

# The job-step variables, in the order the resolver reads them.
SLURM_PROCID = "SLURM_PROCID"
SLURM_STEP_NUM_TASKS = "SLURM_STEP_NUM_TASKS"
SLURM_STEP_NODELIST = "SLURM_STEP_NODELIST"
SLURM_STEP_TASKS_PER_NODE = "SLURM_STEP_TASKS_PER_NODE"
# Read to check this task's place and its GPU binding.
SLURMD_NODENAME = "SLURMD_NODENAME"
SLURM_LOCALID = "SLURM_LOCALID"
SLURM_GPUS_PER_TASK = "SLURM_GPUS_PER_TASK"

# The most hosts (and tasks-per-node entries) a hostlist may name, and the most tasks a step
# may have: counted before anything is expanded, so a forged or mistyped list fails in
# microseconds instead of filling memory. 2**20 is 16 times the largest single range Slurm's
# own hostlist parser accepts (MAX_RANGE, 64K hosts, in src/common/hostlist.c) and several
# times the node count of the largest machines; merely expanding 2**20 host names takes about
# two seconds here, and a cluster spec lists one address per task (as TF's does).
MAX_HOSTS = 1 << 20
MAX_TASKS = 1 << 20
SLURM_MAX_RANGE = 65536

_T = TypeVar("_T")
_BRACKETS = re.compile(r"\[([^\[\]]*)\]")
_TASKS = re.compile(r"([0-9]+)(\(x([0-9]+)\))?$")


def _split_hostlist(hostlist: str) -> list[str]:
    """Splits at commas outside brackets."""
    parts: list[str] = []
    current, depth = "", 0
    for char in hostlist:
        if char == "[":
            depth += 1
            if depth > 1:
                raise ValueError("nested '['")
        elif char == "]":
            depth -= 1
            if depth < 0:
                raise ValueError("unbalanced ']'")
        elif char == "," and depth == 0:
            if not current:
                raise ValueError("empty host name")
            parts.append(current)
            current = ""
            continue
        current += char
    if depth:
        raise ValueError(f"unclosed '[' in {current!r}")
    if current:
        parts.append(current)
    return parts


def _range_bounds(range_exp: str) -> list[tuple[int, int, int]]:
    """'1-3,07' -> [(1, 3, 1), (7, 7, 2)]: each part's bounds and the lower bound's width."""
    bounds_list: list[tuple[int, int, int]] = []
    for part in range_exp.split(","):
        bounds = part.split("-")
        if len(bounds) == 1:
            bounds = bounds * 2
        if len(bounds) != 2 or not all(b.isdigit() and b.isascii() for b in bounds):
            raise ValueError(f"invalid range {part!r}")
        low, high = int(bounds[0]), int(bounds[1])
        if high < low:
            raise ValueError(f"descending range {part!r}")
        bounds_list.append((low, high, len(bounds[0])))
    return bounds_list


def _range_values(bounds: list[tuple[int, int, int]]) -> list[str]:
    """The numbers of a range, each zero-padded to its lower bound's width."""
    return [str(i).zfill(width) for low, high, width in bounds for i in range(low, high + 1)]


def _short(text: str) -> str:
    return text if len(text) <= 200 else text[:200] + "..."


def expand_hostlist(hostlist: str, limit: int = MAX_HOSTS) -> list[str]:
    """Create a list of hosts out of a SLURM hostlist.

    The order of nodes is preserved and no deduplication is done; zero padding
    is kept. Besides TF's forms this accepts text after a bracket and several
    bracket groups ('r[1-2]n[3-4]' gives r1n3 r1n4 r2n3 r2n4), as Slurm does.
    The hosts are counted before any is made: more than `limit` is an error at
    once (TF's version runs out of memory on 'node[1-99999999]').

    Input: 'n[1-2],m5,o[3-4,6,7-9]'
    Output: ['n1', 'n2', 'm5', 'o3', 'o4', 'o6', 'o7', 'o8', 'o9']

    Raises:
      ValueError: If `hostlist` is not a valid hostlist expression, or names
        more than `limit` hosts.
    """
    parts: list[tuple[list[str], list[list[tuple[int, int, int]]]]] = []
    total = 0
    try:
        for part in _split_hostlist(hostlist):
            pieces = _BRACKETS.split(part)  # text, range, text, range, ..., text
            texts, ranges = pieces[0::2], [_range_bounds(r) for r in pieces[1::2]]
            if any(c in text for text in texts for c in "[]"):
                raise ValueError(f"Invalid part: {part}")
            total += math.prod(sum(high - low + 1 for low, high, _ in b) for b in ranges)
            parts.append((texts, ranges))
    except ValueError as e:
        raise ValueError(f'Invalid hostlist format "{hostlist}": {e}') from None
    if total > limit:
        raise ValueError(
            f'Hostlist "{_short(hostlist)}" names {total} hosts, more than {limit} (a Slurm '
            f"step has fewer; Slurm itself refuses one range above {SLURM_MAX_RANGE})"
        )
    hosts: list[str] = []
    for texts, ranges in parts:
        for choice in itertools.product(*(_range_values(b) for b in ranges)):
            hosts.append("".join(t + c for t, c in zip(texts, (*choice, ""), strict=True)))
    return hosts


def expand_tasks_per_node(tasks_per_node: str, limit: int = MAX_HOSTS) -> list[int]:
    """Expands the tasks per node expression from SLURM.

    The order is preserved so it can be matched to the hostlist. The nodes are
    counted before the list is made: more than `limit` is an error at once.
    Input: '3(x2),2,1'
    Output: [3, 3, 2, 1]

    Raises:
      ValueError: If `tasks_per_node` is not a valid expression, or names more
        than `limit` nodes.
    """
    counts: list[tuple[int, int]] = []
    for part in tasks_per_node.split(","):
        m = _TASKS.match(part)
        if m is None:
            raise ValueError(
                f'Invalid tasks-per-node list format "{tasks_per_node}": invalid part {part!r}'
            )
        counts.append((int(m.group(1)), int(m.group(3) or 1)))
    nodes = sum(repeat for _, repeat in counts)
    if nodes > limit:
        raise ValueError(
            f'Tasks-per-node list "{_short(tasks_per_node)}" names {nodes} nodes, more than {limit}'
        )
    return [count for count, repeat in counts for _ in range(repeat)]


def _from_env(name: str, expand: Callable[[str], _T]) -> _T:
    """``expand`` of the Slurm variable ``name``; its errors name the variable."""
    text = _get_slurm_var(name)
    try:
        return expand(text)
    except ValueError as e:
        raise ValueError(f"{name}: {e}") from None


def _slurm_int(name: str, minimum: int) -> int:
    """The Slurm variable ``name`` as an integer (RuntimeError if unset, as TF)."""
    return _env.parse_int(name, _get_slurm_var(name), minimum=minimum)


def _get_slurm_var(name: str, env: Mapping[str, str] | None = None) -> str:
    value = _env.env_raw(name, env)
    if value is None:
        raise RuntimeError(f"{name} not found in environment. Not running inside a SLURM step?")
    return value


def get_num_gpus(env: Mapping[str, str] | None = None) -> int:
    """Returns the number of GPUs visible on the current node.

    From `CUDA_VISIBLE_DEVICES` when it is set ("" means none), else from
    `nvidia-smi --list-gpus` when that program exists, else 0 (TF raises
    FileNotFoundError when it is missing).

    Raises:
      RuntimeError: If nvidia-smi exists but fails.
    """
    count = visible_gpu_count(env)
    if count is not None:
        return count
    if shutil.which("nvidia-smi") is None:
        return 0
    try:
        output = subprocess.check_output(["nvidia-smi", "--list-gpus"], encoding="utf-8")
    except subprocess.CalledProcessError as e:
        raise RuntimeError(
            "Could not get number of GPUs from nvidia-smi. Maybe it is missing?\n"
            f"Output: {e.output}"
        ) from e
    return sum(line.startswith("GPU ") for line in output.strip().split("\n"))


def _slurm_gpus_per_task() -> int | None:
    """``SLURM_GPUS_PER_TASK`` (``--gpus-per-task=[type:]count``): the count, or None if unset."""
    value = _env.env_str(SLURM_GPUS_PER_TASK)
    if value is None:
        return None
    count = value.rsplit(":", 1)[-1]  # "2" or "a100:2"
    if not (count.isdigit() and count.isascii()):
        raise _env.invalid(SLURM_GPUS_PER_TASK, value, "a GPU count, [type:]count with count >= 0")
    return int(count)


class SlurmClusterResolver(ClusterResolver):
    """ClusterResolver for system with Slurm workload manager.

    TF's interface and environment variables (`SLURM_PROCID`, and unless given
    as arguments `SLURM_STEP_NUM_TASKS`, `SLURM_STEP_NODELIST`,
    `SLURM_STEP_TASKS_PER_NODE`; `CUDA_VISIBLE_DEVICES` read for the GPU count
    and, with `auto_set_gpu`, written by `cluster_spec()`), without two bugs of
    TF 2.21's resolver:

    * Host order. TF sorts the hosts as strings and gives `SLURM_PROCID` r the
      r-th task of that order, so with `node9,node10` (one task each) rank 0,
      which runs on node9, is given `node10:8888`. Here hosts keep the step's
      node order, which is how Slurm's default (block) distribution places
      ranks; and where `SLURMD_NODENAME`/`SLURM_LOCALID` show that this task
      runs elsewhere (cyclic or arbitrary distribution) the constructor raises
      RuntimeError instead of handing out a wrong address (`MPIClusterResolver`
      handles any distribution).
    * No GPUs. With 0 GPUs per node or per task TF crashes with `ValueError:
      range() arg 3 must not be zero`. Here such tasks get no GPUs
      (`num_accelerators()` is `{'GPU': 0}`, `CUDA_VISIBLE_DEVICES` is set to
      ""). Also, when Slurm binds GPUs per task (`--gpus-per-task`, seen as
      `SLURM_GPUS_PER_TASK` matching `CUDA_VISIBLE_DEVICES`), TF reads the
      task's own list as the node's and crashes; here the task keeps its list
      and `CUDA_VISIBLE_DEVICES` is left as Slurm set it.

    Other differences: an empty `CUDA_VISIBLE_DEVICES` means 0 GPUs (TF counts
    1), a missing `nvidia-smi` means 0 GPUs, and hostlists may carry text after
    brackets. The step's variables are checked when read, and their errors name
    them: `SLURM_PROCID` must be an integer >= 0 and below the task count (TF
    takes -1, and an out-of-range rank gets no task, or an IndexError from
    `cluster_spec()`), and a hostlist range must not descend (TF expands
    `n[2-1]` to no host). As in TF, `task_type`/`task_id` are `None` until `cluster_spec()`
    is called, and jobs take the task list in sorted job-name order (`chief`
    first).
    """

    def __init__(
        self,
        jobs: dict[str, int] | None = None,
        port_base: int = 8888,
        gpus_per_node: int | None = None,
        gpus_per_task: int | None = None,
        tasks_per_node: int | dict[str, int] | None = None,
        auto_set_gpu: bool = True,
        rpc_layer: str | None = "grpc",
    ) -> None:
        """Creates a new SlurmClusterResolver object.

        Args:
          jobs: Dictionary with job names as key and number of tasks in the job
            as value. Defaults to as many 'worker's as there are (Slurm) tasks.
          port_base: The first port number to start with for processes on a node.
          gpus_per_node: Number of GPUs available on each node. Defaults to the
            number of GPUs in `CUDA_VISIBLE_DEVICES` (or reported by nvidia-smi).
          gpus_per_task: Number of GPUs to be used for each task. Default is to
            evenly distribute the gpus_per_node to tasks_per_node.
          tasks_per_node: Number of tasks running on each node. Can be an
            integer if the number of tasks per node is constant or a dictionary
            mapping hostnames to number of tasks on that node (in node order).
            If not set the Slurm environment is queried for the correct mapping.
          auto_set_gpu: Set the visible CUDA devices automatically while
            resolving the cluster by setting CUDA_VISIBLE_DEVICES environment
            variable. Defaults to True.
          rpc_layer: The protocol TensorFlow used to communicate between nodes.
            Defaults to 'grpc'.

        Raises:
          RuntimeError: If requested more GPUs per node than available or
            requested more tasks than assigned tasks or resolving missing values
            from the environment failed, or this task does not run where block
            distribution would place it.
        """
        self._rank = _slurm_int(SLURM_PROCID, 0)
        if jobs is None:
            jobs = {"worker": _slurm_int(SLURM_STEP_NUM_TASKS, 1)}
        self._jobs = jobs
        self._port_base = port_base

        from_environment = tasks_per_node is None
        if tasks_per_node is None:
            hostlist = _from_env(SLURM_STEP_NODELIST, expand_hostlist)
            counts = _from_env(SLURM_STEP_TASKS_PER_NODE, expand_tasks_per_node)
            self._task_configuration = dict(zip(hostlist, counts, strict=False))  # TF: zip
        elif isinstance(tasks_per_node, dict):
            self._task_configuration = dict(tasks_per_node)
        else:
            hostlist = _from_env(SLURM_STEP_NODELIST, expand_hostlist)
            self._task_configuration = {host: int(tasks_per_node) for host in hostlist}

        max_tasks_per_node = max(self._task_configuration.values())
        num_tasks = sum(self._task_configuration.values())
        if num_tasks > MAX_TASKS:  # every task gets an entry in the cluster spec
            source = SLURM_STEP_TASKS_PER_NODE if from_environment else "tasks_per_node"
            raise ValueError(f"{source}: {num_tasks} tasks, more than {MAX_TASKS}")

        self._gpus_bound_per_task = False
        visible, slurm_gpt = visible_gpu_count(), _slurm_gpus_per_task()
        if gpus_per_node is None and gpus_per_task is None and slurm_gpt and visible == slurm_gpt:
            self._gpus_bound_per_task = True
            gpus_per_task, gpus_per_node = slurm_gpt, slurm_gpt * max_tasks_per_node
        if gpus_per_node is None:
            gpus_per_node = get_num_gpus()
        if gpus_per_task is None:
            gpus_per_task = gpus_per_node // max_tasks_per_node if max_tasks_per_node else 0
        self._gpus_per_node = gpus_per_node
        self._gpus_per_task = gpus_per_task

        self._auto_set_gpu = auto_set_gpu
        self.task_type = None
        self.task_id = None
        self.rpc_layer = rpc_layer
        self._gpu_allocation: list[str] = []
        self._cluster_allocation: dict[str, list[str]] = {}

        if max_tasks_per_node * self._gpus_per_task > self._gpus_per_node:
            raise RuntimeError(
                "Requested more GPUs per node than available. "
                f"({max_tasks_per_node} tasks x {self._gpus_per_task} GPUs per task > "
                f"{self._gpus_per_node} GPUs per node)"
            )
        if sum(self._jobs.values()) != num_tasks:
            raise RuntimeError(
                f"Requested {sum(self._jobs.values())} tasks but only {num_tasks} were assigned."
            )
        if not 0 <= self._rank < num_tasks:
            raise RuntimeError(f"{SLURM_PROCID}={self._rank} is not in [0, {num_tasks}).")
        if from_environment:
            self._check_placement()

    def _placement(self) -> list[tuple[str, int]]:
        """(host, local index) of every task, in rank order (block distribution)."""
        return [(host, k) for host, n in self._task_configuration.items() for k in range(n)]

    def _check_placement(self) -> None:
        host, local = self._placement()[self._rank]
        actual_host = _env.env_raw(SLURMD_NODENAME)
        actual_local = _env.env_int(SLURM_LOCALID, None, minimum=0)
        if (actual_host is not None and actual_host != host) or (
            actual_local is not None and actual_local != local
        ):
            raise RuntimeError(
                f"{SLURM_PROCID}={self._rank} would be task {local} on {host} under Slurm's block "
                f"distribution, but this task runs as {SLURMD_NODENAME}={actual_host}, "
                f"{SLURM_LOCALID}={actual_local}: the step does not use block distribution. "
                "Use srun --distribution=block, or MPIClusterResolver."
            )

    def cluster_spec(self) -> ClusterSpec:
        """Returns a ClusterSpec object based on the latest instance group info.

        Tasks are laid out host by host in the step's node order (not sorted by
        name), `port_base + local index` on each host; jobs take them in sorted
        job-name order. With `auto_set_gpu`, sets `CUDA_VISIBLE_DEVICES` to this
        task's GPUs (unless Slurm already bound GPUs per task).

        Returns:
          A ClusterSpec containing host information retrieved from Slurm's
            environment variables.
        """
        task_list, self._gpu_allocation, self._cluster_allocation = [], [], {}
        gpt = self._gpus_per_task
        # TF lays out each host's GPUs with range(0, gpus_per_node, gpus_per_task): a count
        # that is not an integer (4.0) fails there, with range's TypeError.
        operator.index(self._gpus_per_node)
        operator.index(gpt)
        for host, local in self._placement():
            # TF writes "%s:%d": a float port base is truncated as %d truncates it.
            task_list.append(f"{host}:{int(self._port_base + local)}")
            self._gpu_allocation.append(
                ",".join(str(g) for g in range(local * gpt, (local + 1) * gpt))
            )
        start = 0
        for task_type, num_tasks in sorted(self._jobs.items()):
            end = start + num_tasks
            self._cluster_allocation[task_type] = task_list[start:end]
            if start <= self._rank < end:
                self.task_type = task_type
                self.task_id = self._rank - start
            start = end
        if self._auto_set_gpu and not self._gpus_bound_per_task:
            os.environ[CUDA_VISIBLE_DEVICES] = self._gpu_allocation[self._rank]
        return ClusterSpec(self._cluster_allocation)

    def get_task_info(self) -> tuple[str | None, int | None]:
        """Returns job name and task_id for the process which calls this.

        They are set by `cluster_spec()`; before that both are `None`.

        Returns:
          A string specifying job name the process belongs to and an integer
            specifying the task index the process belongs to in that job.
        """
        return self.task_type, self.task_id

    def master(
        self, task_type: str | None = None, task_id: int | None = None, rpc_layer: str | None = None
    ) -> str:
        """Returns the master string for connecting to a TensorFlow master.

        Args:
          task_type: (Optional) Overrides the default auto-selected task type.
          task_id: (Optional) Overrides the default auto-selected task index.
          rpc_layer: (Optional) Overrides the default RPC protocol TensorFlow
            uses to communicate across nodes.

        Returns:
          A connection string for connecting to a TensorFlow master.
        """
        task_type = task_type if task_type is not None else self.task_type
        task_id = task_id if task_id is not None else self.task_id
        if task_type is not None and task_id is not None:
            return format_master_url(
                self.cluster_spec().task_address(task_type, task_id), rpc_layer or self.rpc_layer
            )
        return ""

    def num_accelerators(
        self, task_type: str | None = None, task_id: int | None = None, config_proto: Any = None
    ) -> dict[str, int]:
        """Returns `{'GPU': gpus_per_task}` (`{'GPU': 0}` without GPUs)."""
        del task_type, task_id, config_proto
        return {"GPU": self._gpus_per_task}
