"""SlurmClusterResolver: TF 2.21's results where TF is right, and its two bugs fixed.

Expected values were produced once with real TF 2.21, e.g. for the first case:
SLURM_PROCID=1 SLURM_STEP_NUM_TASKS=4 SLURM_STEP_NODELIST='node[01-02]'
SLURM_STEP_TASKS_PER_NODE='2(x2)' CUDA_VISIBLE_DEVICES=0,1 /tmp/tfvenv/bin/python -c
"import tensorflow as tf, os; r = tf.distribute.cluster_resolver.SlurmClusterResolver();
print(r.cluster_spec().as_dict(), r.task_type, r.task_id, r.master(), r.num_accelerators(),
os.environ['CUDA_VISIBLE_DEVICES'])"
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from mwms_mpi.cluster import slurm
from mwms_mpi.cluster.slurm import expand_hostlist, expand_tasks_per_node
from mwms_mpi.distribute.cluster_resolver import SlurmClusterResolver

SetEnv = Callable[..., None]


@pytest.fixture
def slurm_env(monkeypatch: pytest.MonkeyPatch) -> SetEnv:
    """Clears SLURM_*/CUDA_VISIBLE_DEVICES (restored after the test) and sets the given ones."""
    for name in list(os.environ):
        if name.startswith(("SLURM_", "SLURMD_")) or name == "CUDA_VISIBLE_DEVICES":
            monkeypatch.delenv(name)
    monkeypatch.setattr(slurm.shutil, "which", lambda _name: None)  # no nvidia-smi

    def set_env(**variables: object) -> None:
        for name in list(os.environ):
            if name.startswith(("SLURM_", "SLURMD_")) or name == "CUDA_VISIBLE_DEVICES":
                monkeypatch.delenv(name)
        for name, value in variables.items():
            monkeypatch.setenv(name, str(value))

    return set_env


def _step(
    procid: int, nodelist: str, tasks: str, ntasks: int, **extra: object
) -> dict[str, object]:
    return dict(
        SLURM_PROCID=procid,
        SLURM_STEP_NUM_TASKS=ntasks,
        SLURM_STEP_NODELIST=nodelist,
        SLURM_STEP_TASKS_PER_NODE=tasks,
        **extra,
    )


def _resolve(r: SlurmClusterResolver) -> tuple[object, ...]:
    cs = r.cluster_spec()
    return (
        cs.as_dict(),
        r.task_type,
        r.task_id,
        r.master(),
        r.num_accelerators(),
        os.environ.get("CUDA_VISIBLE_DEVICES"),
    )


@pytest.mark.parametrize(
    ("hostlist", "hosts"),
    [  # TF's expand_hostlist gives the same lists
        ("n[1-2],m5,o[3-4,6,7-9]", ["n1", "n2", "m5", "o3", "o4", "o6", "o7", "o8", "o9"]),
        ("gpu[008-010]", ["gpu008", "gpu009", "gpu010"]),
        ("node[01-02],gpu[1-3,7]", ["node01", "node02", "gpu1", "gpu2", "gpu3", "gpu7"]),
        ("a", ["a"]),
        ("", []),
        ("[1-2]", ["1", "2"]),
        ("a[01-3]", ["a01", "a02", "a03"]),
        ("node9,node10", ["node9", "node10"]),
        # Slurm forms TF rejects ('Invalid part'):
        ("x[1-2]y", ["x1y", "x2y"]),
        ("r[1-2]n[3-4]", ["r1n3", "r1n4", "r2n3", "r2n4"]),
    ],
)
def test_expand_hostlist(hostlist: str, hosts: list[str]) -> None:
    assert expand_hostlist(hostlist) == hosts


@pytest.mark.parametrize(
    "hostlist", ["a,,b", "a[1-2", "a[[1]]", "a[1-2-3]", "a[x-2]", "a]b", "a[3-1]"]
)
def test_expand_hostlist_errors(hostlist: str) -> None:
    with pytest.raises(ValueError, match="^" + re.escape(f'Invalid hostlist format "{hostlist}"')):
        expand_hostlist(hostlist)


def test_expand_hostlist_matches_scontrol(tmp_path: Path) -> None:
    # `make test-slurm` runs this where .ci/run has installed Slurm, with
    # MWMS_TEST_SLURM=required: there a missing scontrol fails instead of skipping.
    if shutil.which("scontrol") is None:
        if os.environ.get("MWMS_TEST_SLURM") == "required":
            pytest.fail("MWMS_TEST_SLURM=required, but scontrol is not installed")
        pytest.skip("scontrol not installed (make test-slurm runs it where Slurm is)")
    # scontrol wants a configuration even to expand a hostlist; with none (Slurm installed but
    # no cluster running, as on a machine where an earlier CI run installed slurm-wlm) it
    # fails on a DNS lookup. A two-line one is enough.
    conf = tmp_path / "slurm.conf"
    conf.write_text("ClusterName=hostlist\nSlurmctldHost=localhost\n")
    env = {**os.environ, "SLURM_CONF": str(conf)}
    for hostlist in ["node[01-04],gpu[1-3,7]", "n[1-2],m5,o[3-4,6,7-9]", "gpu[008-010]"]:
        out = subprocess.run(
            ["scontrol", "show", "hostnames", hostlist],
            capture_output=True,
            text=True,
            check=True,
            env=env,
        )
        assert expand_hostlist(hostlist) == out.stdout.split()


@pytest.mark.parametrize(
    ("text", "counts"),
    [("3(x2),2,1", [3, 3, 2, 1]), ("2(x2)", [2, 2]), ("3,1", [3, 1]), ("4", [4]), ("1(x0)", [])],
)
def test_expand_tasks_per_node(text: str, counts: list[int]) -> None:
    assert expand_tasks_per_node(text) == counts


@pytest.mark.parametrize("text", ["", "a", "2(x)", "2(x2"])
def test_expand_tasks_per_node_errors(text: str) -> None:
    with pytest.raises(
        ValueError, match="^" + re.escape(f'Invalid tasks-per-node list format "{text}"')
    ):
        expand_tasks_per_node(text)


NODE01_02 = {"worker": ["node01:8888", "node01:8889", "node02:8888", "node02:8889"]}


@pytest.mark.parametrize(
    ("procid", "expected"),
    [  # TF 2.21, verbatim
        (0, (NODE01_02, "worker", 0, "grpc://node01:8888", {"GPU": 1}, "0")),
        (1, (NODE01_02, "worker", 1, "grpc://node01:8889", {"GPU": 1}, "1")),
        (2, (NODE01_02, "worker", 2, "grpc://node02:8888", {"GPU": 1}, "0")),
        (3, (NODE01_02, "worker", 3, "grpc://node02:8889", {"GPU": 1}, "1")),
    ],
)
def test_two_nodes_two_tasks_each_gres_gpu2(
    slurm_env: SetEnv, procid: int, expected: tuple
) -> None:
    slurm_env(**_step(procid, "node[01-02]", "2(x2)", 4, CUDA_VISIBLE_DEVICES="0,1"))
    r = SlurmClusterResolver()
    assert (r.task_type, r.task_id) == (None, None)  # as TF: set by cluster_spec()
    assert _resolve(r) == expected
    assert r.get_task_info() == (expected[1], expected[2])
    assert (r.rpc_layer, r.environment) == ("grpc", "")


CHIEF = {"chief": ["node01:9000"], "worker": ["node01:9001", "node02:9000", "node02:9001"]}


@pytest.mark.parametrize(
    ("procid", "expected"),
    [  # TF 2.21 with jobs={"chief": 1, "worker": 3}, port_base=9000, CUDA_VISIBLE_DEVICES=0,1,2,3
        (0, (CHIEF, "chief", 0, "grpc://node01:9000", {"GPU": 2}, "0,1")),
        (1, (CHIEF, "worker", 0, "grpc://node01:9001", {"GPU": 2}, "2,3")),
        (2, (CHIEF, "worker", 1, "grpc://node02:9000", {"GPU": 2}, "0,1")),
        (3, (CHIEF, "worker", 2, "grpc://node02:9001", {"GPU": 2}, "2,3")),
    ],
)
def test_chief_job(slurm_env: SetEnv, procid: int, expected: tuple) -> None:
    slurm_env(**_step(procid, "node[01-02]", "2(x2)", 4, CUDA_VISIBLE_DEVICES="0,1,2,3"))
    assert (
        _resolve(SlurmClusterResolver(jobs={"chief": 1, "worker": 3}, port_base=9000)) == expected
    )


UNEVEN = {"worker": ["node01:8888", "node01:8889", "node01:8890", "node02:8888"]}


@pytest.mark.parametrize(
    ("procid", "expected"),
    [  # TF 2.21, `srun -N 2 -n 4`: SLURM_STEP_TASKS_PER_NODE=3,1, CUDA_VISIBLE_DEVICES=0,1,2
        (0, (UNEVEN, "worker", 0, "grpc://node01:8888", {"GPU": 1}, "0")),
        (2, (UNEVEN, "worker", 2, "grpc://node01:8890", {"GPU": 1}, "2")),
        (3, (UNEVEN, "worker", 3, "grpc://node02:8888", {"GPU": 1}, "0")),
    ],
)
def test_uneven_tasks_per_node(slurm_env: SetEnv, procid: int, expected: tuple) -> None:
    slurm_env(**_step(procid, "node[01-02]", "3,1", 4, CUDA_VISIBLE_DEVICES="0,1,2"))
    assert _resolve(SlurmClusterResolver()) == expected


def test_other_jobs_and_options(slurm_env: SetEnv) -> None:
    """TF 2.21 gives the same values for each of these (SLURM_PROCID=1, 2(x2), GPUs 0,1)."""
    env = _step(1, "node[01-02]", "2(x2)", 4, CUDA_VISIBLE_DEVICES="0,1")
    slurm_env(**env)
    r = SlurmClusterResolver(jobs={"worker": 2, "ps": 1, "chief": 1})
    assert _resolve(r) == (
        {"chief": ["node01:8888"], "ps": ["node01:8889"], "worker": ["node02:8888", "node02:8889"]},
        "ps",
        0,
        "grpc://node01:8889",
        {"GPU": 1},
        "1",
    )
    slurm_env(**env)
    r = SlurmClusterResolver(gpus_per_node=8, gpus_per_task=2, auto_set_gpu=False)
    assert _resolve(r) == (NODE01_02, "worker", 1, "grpc://node01:8889", {"GPU": 2}, "0,1")
    slurm_env(**env)
    r = SlurmClusterResolver(tasks_per_node=2, rpc_layer=None)
    assert _resolve(r) == (NODE01_02, "worker", 1, "node01:8889", {"GPU": 1}, "1")
    slurm_env(**env)
    assert SlurmClusterResolver().master("worker", 3, rpc_layer="x") == "x://node02:8889"


def test_errors_as_tf(slurm_env: SetEnv) -> None:
    slurm_env(**_step(1, "node[01-02]", "2(x2)", 4, CUDA_VISIBLE_DEVICES="0,1"))
    with pytest.raises(RuntimeError, match=r"^Requested 5 tasks but only 4 were assigned.$"):
        SlurmClusterResolver(jobs={"worker": 5})
    with pytest.raises(RuntimeError, match=r"^Requested more GPUs per node than available."):
        SlurmClusterResolver(gpus_per_task=2)
    slurm_env(SLURM_STEP_NUM_TASKS=4)
    with pytest.raises(
        RuntimeError,
        match=r"^SLURM_PROCID not found in environment. Not running inside a SLURM step\?$",
    ):
        SlurmClusterResolver()
    slurm_env(SLURM_PROCID=0)
    with pytest.raises(RuntimeError, match=r"^SLURM_STEP_NUM_TASKS not found in environment."):
        SlurmClusterResolver()
    with pytest.raises(RuntimeError, match=r"^SLURM_STEP_NODELIST not found in environment."):
        SlurmClusterResolver(jobs={"worker": 1})
    slurm_env(SLURM_PROCID=0, SLURM_STEP_NUM_TASKS=1, SLURM_STEP_NODELIST="a")
    with pytest.raises(RuntimeError, match=r"^SLURM_STEP_TASKS_PER_NODE not found in environment."):
        SlurmClusterResolver()
    slurm_env(**_step(5, "a", "2", 2, CUDA_VISIBLE_DEVICES="0,1"))
    with pytest.raises(RuntimeError, match=r"SLURM_PROCID=5 is not in \[0, 2\)"):  # TF: IndexError
        SlurmClusterResolver()


def test_bug_host_order_node9_node10(slurm_env: SetEnv) -> None:
    """TF sorts hosts as strings, then indexes that order by rank.

    TF 2.21 with SLURM_STEP_NODELIST=node[9-10], SLURM_STEP_TASKS_PER_NODE=1(x2),
    CUDA_VISIBLE_DEVICES=0:
      rank 0 -> ({'worker': ['node10:8888', 'node9:8888']}, 'worker', 0, 'grpc://node10:8888')
      rank 1 -> (same spec, 'worker', 1, 'grpc://node9:8888')
    but Slurm runs rank 0 on node9: TF hands it node10's address. Here hosts keep the step's
    node order.
    """
    for procid, host in [(0, "node9"), (1, "node10")]:
        slurm_env(
            **_step(procid, "node[9-10]", "1(x2)", 2, CUDA_VISIBLE_DEVICES="0"),
            SLURMD_NODENAME=host,
            SLURM_LOCALID=0,
        )
        cs, task_type, task_id, master, gpus, visible = _resolve(SlurmClusterResolver())
        assert cs == {"worker": ["node9:8888", "node10:8888"]}
        assert (task_type, task_id, master) == ("worker", procid, f"grpc://{host}:8888")
        assert (gpus, visible) == ({"GPU": 1}, "0")


def test_non_block_distribution_is_refused(slurm_env: SetEnv) -> None:
    """`srun --distribution=cyclic`: rank 1 runs on node02; block order would put it on node01."""
    slurm_env(**_step(1, "node[01-02]", "2(x2)", 4), SLURMD_NODENAME="node02", SLURM_LOCALID=0)
    with pytest.raises(RuntimeError, match=r"SLURM_PROCID=1 would be task 1 on node01.*node02"):
        SlurmClusterResolver()
    # A user-given layout is taken as is (no placement check).
    r = SlurmClusterResolver(tasks_per_node={"node01": 2, "node02": 2})
    assert r.cluster_spec().as_dict() == NODE01_02


def test_bug_cpu_only(slurm_env: SetEnv) -> None:
    """No GPUs must mean CPU tasks, not a crash.

    TF 2.21, node9,node10 one task each:
      CUDA_VISIBLE_DEVICES unset, no nvidia-smi -> FileNotFoundError: 'nvidia-smi'
      SlurmClusterResolver(gpus_per_node=0) -> ValueError: range() arg 3 must not be zero
      CUDA_VISIBLE_DEVICES="" -> counted as 1 GPU: num_accelerators {'GPU': 1},
        CUDA_VISIBLE_DEVICES=0
    """
    step = _step(0, "node9,node10", "1(x2)", 2)
    cases: list[tuple[dict[str, str], dict[str, Any]]] = [
        ({}, {}),
        ({}, {"gpus_per_node": 0}),
        ({"CUDA_VISIBLE_DEVICES": ""}, {}),
    ]
    for extra, kwargs in cases:
        slurm_env(**step, **extra)
        r = SlurmClusterResolver(**kwargs)
        assert _resolve(r) == (
            {"worker": ["node9:8888", "node10:8888"]},
            "worker",
            0,
            "grpc://node9:8888",
            {"GPU": 0},
            "",
        )


def test_fewer_gpus_than_tasks_gives_cpu_tasks(slurm_env: SetEnv) -> None:
    """TF 2.21: 1 GPU per node, 2 tasks per node -> gpus_per_task 0 -> ValueError range() arg 3."""
    slurm_env(**_step(1, "node[01-02]", "2(x2)", 4, CUDA_VISIBLE_DEVICES="0"))
    assert _resolve(SlurmClusterResolver())[4:] == ({"GPU": 0}, "")
    slurm_env(**_step(0, "a", "2", 2, CUDA_VISIBLE_DEVICES="0,1,2,3"))
    assert _resolve(SlurmClusterResolver(gpus_per_task=0))[4:] == ({"GPU": 0}, "")


@pytest.mark.parametrize("procid", [0, 1, 2, 3])
def test_gpus_per_task_binding(slurm_env: SetEnv, procid: int) -> None:
    """`srun --gpus-per-task=1`: Slurm gives each task its own CUDA_VISIBLE_DEVICES (0 or 1).

    TF 2.21 reads that per-task list as the node's GPUs (1 GPU, 2 tasks) and crashes on every rank
    with ValueError: range() arg 3 must not be zero. Here each task keeps the GPU Slurm bound.
    """
    local = procid % 2
    slurm_env(
        **_step(procid, "node[01-02]", "2(x2)", 4),
        CUDA_VISIBLE_DEVICES=local,
        SLURM_GPUS_PER_TASK=1,
        SLURM_LOCALID=local,
    )
    assert _resolve(SlurmClusterResolver()) == (
        NODE01_02,
        "worker",
        procid,
        f"grpc://{NODE01_02['worker'][procid]}",
        {"GPU": 1},
        str(local),  # left as Slurm set it
    )


def test_nvidia_smi_fallback(slurm_env: SetEnv, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(slurm.shutil, "which", lambda _name: "/usr/bin/nvidia-smi")
    monkeypatch.setattr(
        slurm.subprocess,
        "check_output",
        lambda *_a, **_k: "GPU 0: H100 (UUID: GPU-1)\nGPU 1: H100 (UUID: GPU-2)\n",
    )
    slurm_env(**_step(1, "a", "2", 2))
    assert _resolve(SlurmClusterResolver())[4:] == ({"GPU": 1}, "1")

    def fail(*_a: object, **_k: object) -> str:
        raise subprocess.CalledProcessError(9, "nvidia-smi", output="no driver")

    monkeypatch.setattr(slurm.subprocess, "check_output", fail)
    slurm_env(**_step(1, "a", "2", 2))  # cluster_spec() above wrote CUDA_VISIBLE_DEVICES
    with pytest.raises(RuntimeError, match="Could not get number of GPUs from nvidia-smi"):
        SlurmClusterResolver()


# Issue 23, item 11: SLURM_STEP_NODELIST=node[1-99999999] ended in MemoryError after 13 s and
# 4 GB, and SLURM_PROCID=zero raised TF's bare `invalid literal for int()`. A hostlist or
# tasks-per-node list is now counted before it is expanded, and each variable names itself.


def _bounded(call: Callable[[], object]) -> ValueError:
    """Runs ``call``, which must raise ValueError at once (the timing is only a sanity check:
    the count comes before any expansion, so it takes microseconds)."""
    start = time.perf_counter()
    with pytest.raises(ValueError) as caught:
        call()
    assert time.perf_counter() - start < 2.0
    return caught.value


def test_a_huge_hostlist_is_refused_before_it_is_expanded(slurm_env: SetEnv) -> None:
    slurm_env(**_step(0, "node[1-99999999]", "1", 1))
    error = _bounded(SlurmClusterResolver)
    assert str(error) == (
        'SLURM_STEP_NODELIST: Hostlist "node[1-99999999]" names 99999999 hosts, more than '
        f"{slurm.MAX_HOSTS} (a Slurm step has fewer; Slurm itself refuses one range above 65536)"
    )
    # Every way to name many hosts is counted: many parts, several brackets, a huge bound.
    for hostlist in ["a[1-600000],b[1-600000]", "r[1-2000]n[1-2000]", "n[0-" + "9" * 400 + "]"]:
        assert "more than 1048576" in str(_bounded(lambda h=hostlist: expand_hostlist(h)))
    assert expand_hostlist("a,b[1-2]", limit=3) == ["a", "b1", "b2"]  # the limit itself is fine
    with pytest.raises(ValueError, match="names 3 hosts, more than 2 "):
        expand_hostlist("a,b[1-2]", limit=2)
    assert expand_tasks_per_node("2(x2),1", limit=3) == [2, 2, 1]


def test_a_huge_tasks_per_node_list_is_refused_before_it_is_expanded(slurm_env: SetEnv) -> None:
    slurm_env(**_step(0, "a", "2(x99999999)", 2))
    error = _bounded(SlurmClusterResolver)
    assert str(error) == (
        'SLURM_STEP_TASKS_PER_NODE: Tasks-per-node list "2(x99999999)" names 99999999 nodes, '
        f"more than {slurm.MAX_HOSTS}"
    )
    assert "more than" in str(_bounded(lambda: expand_tasks_per_node("1(x600000),1(x600000)")))
    # Tasks are counted too: the cluster spec lists every one of them.
    slurm_env(**_step(0, "a", "99999999999", 99999999999))
    assert str(_bounded(SlurmClusterResolver)) == (
        f"SLURM_STEP_TASKS_PER_NODE: 99999999999 tasks, more than {slurm.MAX_TASKS}"
    )
    slurm_env(**_step(0, "a[1-2]", "1(x2)", 2))
    assert "tasks_per_node: 2000000 tasks, more than" in str(
        _bounded(lambda: SlurmClusterResolver(tasks_per_node=10**6))
    )


def test_a_bad_hostlist_in_the_environment_names_the_variable(slurm_env: SetEnv) -> None:
    slurm_env(**_step(0, "a[1-2", "1", 1))
    with pytest.raises(ValueError, match=r'^SLURM_STEP_NODELIST: Invalid hostlist format "a\[1-2"'):
        SlurmClusterResolver()
    slurm_env(**_step(0, "a", "1(x", 1))
    with pytest.raises(ValueError, match=r"^SLURM_STEP_TASKS_PER_NODE: Invalid tasks-per-node"):
        SlurmClusterResolver()


@pytest.mark.parametrize(
    ("variable", "value", "expected"),
    [  # TF 2.21 with SLURM_PROCID=zero: ValueError: invalid literal for int() with base 10: 'zero'
        ("SLURM_PROCID", "zero", "an integer >= 0"),
        ("SLURM_PROCID", "", "an integer >= 0"),
        ("SLURM_STEP_NUM_TASKS", "two", "an integer >= 1"),
        ("SLURM_LOCALID", "x", "an integer >= 0"),
        ("SLURM_GPUS_PER_TASK", "a100:x", "a GPU count, [type:]count with count >= 0"),
    ],
)
def test_a_bad_slurm_number_names_the_variable(
    slurm_env: SetEnv, variable: str, value: str, expected: str
) -> None:
    slurm_env(**{**_step(0, "a", "2", 2), variable: value})
    with pytest.raises(ValueError) as caught:
        SlurmClusterResolver()
    assert str(caught.value) == f"Environment variable {variable}={value!r} is not {expected}"


def test_port_base_and_gpu_counts_as_tf_formats_and_ranges_them(slurm_env: SetEnv) -> None:
    # TF 2.21: "%s:%d" truncates a float port base; range(0, gpus_per_node, gpus_per_task) in
    # cluster_spec() refuses a float count (after construction, before any task is set).
    slurm_env(**_step(1, "node[01-02]", "2(x2)", 4, CUDA_VISIBLE_DEVICES="0,1"))
    r = SlurmClusterResolver(port_base=2222.7)  # type: ignore[arg-type]
    assert r.cluster_spec().as_dict() == {
        "worker": ["node01:2222", "node01:2223", "node02:2222", "node02:2223"]
    }
    assert r.master() == "grpc://node01:2223"
    for kwargs in ({"gpus_per_node": 2.0, "gpus_per_task": 1}, {"gpus_per_task": 1.0}):
        slurm_env(**_step(1, "node[01-02]", "2(x2)", 4, CUDA_VISIBLE_DEVICES="0,1"))
        r = SlurmClusterResolver(**kwargs)  # type: ignore[arg-type]
        with pytest.raises(
            TypeError, match=r"^'float' object cannot be interpreted as an integer$"
        ):
            r.cluster_spec()
        assert (r.task_type, r.task_id) == (None, None)
