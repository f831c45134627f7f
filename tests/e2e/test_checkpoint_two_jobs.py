"""Two jobs writing one checkpoint directory: the second is refused, the first never harmed.

Issue 23, item 9: two jobs saving into one directory corrupted each other silently (11 of 40
saves raised; the others returned paths holding the other job's values). Each job here is its
own Python process (its own job id: host and pid, no launcher around it) running the program of
the issue: 40 ``CheckpointManager.save()`` calls, each read back. The second starts once the
first has saved, and they then run side by side. Serial tests: no MPI in this process.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.support.launch import child_env, write_script

pytestmark = pytest.mark.timeout(180)

JOB = """
    import json, sys, time
    from pathlib import Path
    import numpy as np
    from mwms_mpi import train

    directory, tag, marker, hold = sys.argv[1], float(sys.argv[2]), Path(sys.argv[3]), sys.argv[4]
    after = Path(sys.argv[5]) if sys.argv[5] != "-" else None
    value = np.full(1000, tag)
    manager = train.CheckpointManager(train.Checkpoint(v=value), directory, max_to_keep=3)
    out = {"saved": 0, "errors": [], "foreign": 0}
    for i in range(40):
        try:
            path = manager.save()
            target = np.zeros(1000)
            train.Checkpoint(v=target).restore(path).expect_partial()
            out["saved"] += 1
            out["foreign"] += int(not (target == value).all())
        except Exception as exc:
            out["errors"].append(f"{type(exc).__name__}: {exc}")
        if i == 0:
            marker.touch()
        time.sleep(0.01)
    marker.with_suffix(".done").touch()
    deadline = time.monotonic() + 120
    while after is not None and not after.exists() and time.monotonic() < deadline:
        time.sleep(0.01)  # keep the lock until the other job has made all its attempts
    if hold == "hold":  # keep the lock until killed
        marker.with_suffix(".holding").touch()
        time.sleep(300)
    print(json.dumps(out), flush=True)
"""


def _env() -> dict[str, str]:
    env = child_env()
    env.pop("SLURM_JOB_ID", None)  # each process is a job of its own
    return env


def _start(
    script: Path, directory: Path, tag: int, marker: Path, hold: str = "", after: Path | None = None
) -> Any:
    """A job saving 40 times into ``directory``; it touches ``marker`` after its first save and
    ``marker.done`` after its last, then (``after``) keeps its lock until that file exists."""
    argv = [sys.executable, str(script), str(directory), str(tag), str(marker), hold or "-"]
    argv.append(str(after) if after is not None else "-")
    return subprocess.Popen(
        argv, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def _wait_for(path: Path, process: Any, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.02)


def _result(process: Any) -> dict[str, Any]:
    out, err = process.communicate(timeout=120)
    assert process.returncode == 0, err
    return dict(json.loads(out.strip().splitlines()[-1]))


def test_the_second_job_is_refused_and_the_first_is_untouched(tmp_path: Path) -> None:
    script = write_script(tmp_path, "job.py", JOB)
    directory = tmp_path / "ckpts"
    # the first keeps its lock until the second has made all 40 attempts: under load the
    # second's start-up could outlast the first's saves, which then freed the lock (seen in CI)
    first = _start(script, directory, 1, tmp_path / "first", after=tmp_path / "second.done")
    _wait_for(tmp_path / "first", first)
    second = _start(script, directory, 2, tmp_path / "second")
    a, b = _result(first), _result(second)
    assert a == {"saved": 40, "errors": [], "foreign": 0}
    assert (b["saved"], b["foreign"], len(b["errors"])) == (0, 0, 40), b
    assert all(e.startswith("FailedPreconditionError") for e in b["errors"]), b["errors"][0]
    assert "is in use by another job" in b["errors"][0] and "is running" in b["errors"][0]
    # the first job exited: its lock went with it, and a third job may write
    third = _start(script, directory, 3, tmp_path / "third")
    c = _result(third)
    assert c == {"saved": 40, "errors": [], "foreign": 0}


def test_a_killed_jobs_lock_is_taken_over_on_its_host(tmp_path: Path) -> None:
    script = write_script(tmp_path, "job.py", JOB)
    directory = tmp_path / "ckpts"
    holder = _start(script, directory, 1, tmp_path / "first", hold="hold")
    _wait_for(tmp_path / "first.holding", holder, timeout=120)
    assert json.loads((directory / ".mwms_mpi.lock").read_text())["pid"] == holder.pid
    os.kill(holder.pid, signal.SIGKILL)
    holder.wait()
    after = _start(script, directory, 2, tmp_path / "second")
    result = _result(after)
    assert result == {"saved": 40, "errors": [], "foreign": 0}
