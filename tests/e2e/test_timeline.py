"""``MWMS_MPI_TIMELINE``: one event per collective per rank, a late rank seen, a hang on disk."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.support.launch import REPO_ROOT, run_mpi, run_python_mpi, write_script

pytestmark = pytest.mark.timeout(180)

LATE = """
    import time
    import numpy as np
    import mwms_mpi.distribute as dist

    strategy = dist.MultiWorkerMirroredStrategy()
    rank = strategy.cluster_resolver.task_id
    for step in range(3):
        if step == 1 and rank == 1:
            time.sleep(SLEEP)
        strategy.reduce("SUM", strategy.run(lambda: np.ones(256, np.float32)), axis=None)
"""


def _slices(path: Path) -> list[dict]:
    data = json.loads(path.read_text())
    return [e for e in data["traceEvents"] if e["ph"] in ("X", "B", "E")]


def test_demo_timeline_has_every_call_of_every_rank(tmp_path: Path) -> None:
    trace = tmp_path / "trace.json"
    args = ["--epochs", "1", "--quiet", "--checkpoint-dir", str(tmp_path / "ckpt")]
    script = REPO_ROOT / "scripts" / "train_digits.py"
    result = run_python_mpi(2, script, args, env={"MWMS_MPI_TIMELINE": str(trace)}, timeout=120)
    assert result.returncode == 0, result.describe()
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("trace")) == [
        "trace.json"
    ]  # the per-rank files were merged and removed
    events = [e for e in _slices(trace) if e["ph"] == "X"]
    # a call in flight for over the flush period (a rank waiting for a slower one, under load)
    # is written as an open slice, "B", then its end, "E": it counts once, by its "B"
    calls = {
        r: [(e["args"]["comm"], e["args"]["call"]) for e in _slices(trace)
            if e["pid"] == r and e["ph"] in ("X", "B")]
        for r in (0, 1)
    }  # fmt: skip
    assert calls[0] and sorted(calls[0]) == sorted(calls[1]), calls  # the same calls on both
    names = {e["name"] for e in events}
    assert {"Strategy.reduce", "StrategyExtended.batch_reduce_to"} <= names, names
    for e in events:
        args = e["args"]
        assert args["agreed"] and args["bytes"] is not None and args["bytes"] >= 0, e
        assert args["agreement_us"] >= args["wait_us"] >= 0 and args["transfer_us"] >= 0, e
        assert e["dur"] == pytest.approx(args["agreement_us"] + args["transfer_us"], abs=0.01)
    reduce = next(e for e in events if e["args"]["op"] == "SUM" and e["args"]["bytes"] == 4)
    assert reduce["cat"] == "all_reduce", reduce


def test_a_late_rank_shows_as_the_others_wait(tmp_path: Path) -> None:
    script = write_script(tmp_path, "late.py", LATE.replace("SLEEP", "1.5"))
    trace = tmp_path / "trace.json"
    result = run_python_mpi(2, script, env={"MWMS_MPI_TIMELINE": str(trace)}, timeout=60)
    assert result.returncode == 0, result.describe()
    reduces = [e for e in _slices(trace) if e.get("args", {}).get("op") == "SUM"]
    waited = {e["pid"]: e["args"]["wait_us"] for e in reduces if e["ph"] in ("X", "E")}
    late = [e for e in reduces if e["ph"] == "E"]  # the long wait was written as an open slice
    assert [e["pid"] for e in late] == [0], reduces
    assert late[0]["args"]["wait_us"] > 1.2e6 and late[0]["args"]["agreement_us"] > 1.2e6
    assert waited[1] < 0.5e6, waited
    opened = [e for e in reduces if e["ph"] == "B"]
    assert [e["pid"] for e in opened] == [0] and opened[0]["name"] == "Strategy.reduce"


def test_a_hung_job_leaves_its_timeline_and_merge_joins_it(tmp_path: Path) -> None:
    script = write_script(tmp_path, "hang.py", LATE.replace("SLEEP", "3600"))
    trace = tmp_path / "trace.json"
    result = run_python_mpi(2, script, env={"MWMS_MPI_TIMELINE": str(trace)}, timeout=8)
    # the launcher's time limit ended it (hydra's proxy was seen to crash at its timeout and
    # exit 0 nonetheless, so its own words count as much as the status)
    assert result.returncode != 0 or result.launcher_timed_out, result.describe()
    assert not result.killed, result.describe()
    assert not trace.exists()
    merged = run_mpi(1, [sys.executable, "-m", "mwms_mpi", "timeline", "merge", trace])
    assert merged.returncode == 0, merged.describe()
    assert "ranks [0, 1] did not end normally" in merged.stdout, merged.describe()
    events = _slices(trace)
    hung = [e for e in events if e["ph"] == "B"]
    comm = hung[0]["args"]["comm"] if hung else None
    made = [e["args"]["call"] for e in events if e["pid"] == 1 and e["args"]["comm"] == comm]
    # rank 0 hangs in the call rank 1 (asleep in step 1) never made: the one after its last
    assert made and [(e["pid"], e["name"], e["args"]["call"]) for e in hung] == [
        (0, "Strategy.reduce", max(made) + 1)
    ], events
    assert not any(e["ph"] == "E" for e in events)
    summary = run_mpi(1, [sys.executable, "-m", "mwms_mpi", "timeline", "summary", trace])
    assert summary.returncode == 0 and "slowest call" in summary.stdout, summary.describe()


@pytest.mark.parametrize("kind", ["existing directory", "trailing separator"])
def test_a_directory_is_refused_and_nothing_is_written_beside_it(tmp_path: Path, kind: str) -> None:
    # Issue 23, item 11: MWMS_MPI_TIMELINE=/tmp wrote /tmp.rank0 and /tmp.rank1 into / and then
    # failed to merge them into the directory. Each rank now refuses it, naming the variable.
    job = tmp_path / "job"
    job.mkdir()
    script = write_script(tmp_path, "late.py", LATE.replace("SLEEP", "0"))
    if kind == "existing directory":
        value = job / "traces"
        value.mkdir()
    else:
        value = job / "new"
    text = str(value) + ("/" if kind == "trailing separator" else "")
    result = run_python_mpi(2, script, env={"MWMS_MPI_TIMELINE": text}, timeout=60)
    assert result.returncode != 0, result.describe()
    assert f"Environment variable MWMS_MPI_TIMELINE={text!r} is not a file path" in (
        result.stderr
    ), result.describe()
    assert result.wall_s < 45, result.describe()
    left = sorted(p.relative_to(job).as_posix() for p in job.rglob("*"))
    assert left == (["traces"] if kind == "existing directory" else []), left
