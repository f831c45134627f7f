"""A rank that leaves the job ends it, with or without ``python -m mwms_mpi.run``; a normal end
where ranks finish at different times is not mistaken for a loss.

Serial tests that launch ``mpiexec`` (docs/architecture.md, "Every call is agreed": a lost rank
leaves the job broken). Each job must end within :data:`PROMPT_S` on the 2-core machine, with a
message that names the rank.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from tests.support.launch import LaunchResult, json_records, run_mpi, write_script

pytestmark = pytest.mark.timeout(120)

PROMPT_S = 10.0
RANKS = 4

# Every script: a strategy, one reduce every rank makes, then rank 1 leaves (how: argv[1])
# while the others wait in the next reduce.
LEAVER = """
    import json, os, signal, sys, time
    import numpy as np
    import mwms_mpi.distribute as ds

    how = sys.argv[1]
    strategy = ds.MultiWorkerMirroredStrategy()
    rank = strategy.cluster_resolver.task_id
    print(json.dumps({"rank": rank, "pid": os.getpid()}), flush=True)
    first = strategy.reduce("sum", strategy.run(lambda: np.ones(4)), axis=None)
    if rank == 1:
        time.sleep(0.5)  # the others are blocked in the next reduce by now
        if how == "raise":
            raise KeyError("rank 1 lost its batch")
        if how == "exit0":
            sys.exit(0)
        if how == "sigkill":
            os.kill(os.getpid(), signal.SIGKILL)
    strategy.reduce("sum", strategy.run(lambda: np.ones(4)), axis=None)
    print("unreachable: rank", rank, "passed the reduce", flush=True)
"""


def _run_plain(tmp_path: Path, how: str, env: dict[str, str] | None = None) -> LaunchResult:
    """``mpiexec -n 4 python leaver.py HOW``: plain python, no runner."""
    script = write_script(tmp_path, "leaver.py", LEAVER)
    return run_mpi(RANKS, [sys.executable, script, how], timeout=60, env=env)


def _assert_ended_promptly(result: LaunchResult) -> None:
    assert result.returncode != 0, result.describe()
    assert not result.killed and not result.launcher_timed_out, result.describe()
    assert result.wall_s < PROMPT_S, result.describe()
    assert "unreachable" not in result.stdout, result.describe()


def test_an_uncaught_exception_without_the_runner_aborts_the_job(tmp_path: Path) -> None:
    result = _run_plain(tmp_path, "raise")
    _assert_ended_promptly(result)
    assert "KeyError: 'rank 1 lost its batch'" in result.stderr, result.describe()
    assert "[mwms_mpi] rank 1 of 4: uncaught KeyError, aborting the job" in result.stderr


EARLY = """
    import time
    from mpi4py import MPI
    import mwms_mpi.distribute as ds

    if MPI.COMM_WORLD.Get_rank() == 1:
        time.sleep(0.5)  # the others are blocked in the strategy's construction by now
        raise KeyError("rank 1 failed before its strategy")
    ds.MultiWorkerMirroredStrategy()
    print("unreachable: a strategy without rank 1", flush=True)
"""


def test_an_uncaught_exception_before_any_strategy_aborts_the_job(tmp_path: Path) -> None:
    # No communicator exists yet on the failing rank: the abort hook is installed on import.
    script = write_script(tmp_path, "early.py", EARLY)
    result = run_mpi(RANKS, [sys.executable, script], timeout=60)
    _assert_ended_promptly(result)
    assert "KeyError: 'rank 1 failed before its strategy'" in result.stderr, result.describe()
    assert "[mwms_mpi] rank 1 of 4: uncaught KeyError, aborting the job" in result.stderr


def test_an_early_exit_zero_ends_the_job_naming_the_rank(tmp_path: Path) -> None:
    result = _run_plain(tmp_path, "exit0")
    _assert_ended_promptly(result)
    assert re.search(
        r"rank [023] of 4: rank 1 left the job after its call \d+ on communicator "
        r"mwms-strategy, but this rank is blocked in Strategy.reduce \(all_reduce, call \d+\), "
        r"which rank 1 never entered; aborting the job",
        result.stderr,
    ), result.describe()


def test_without_abort_on_error_a_failing_rank_still_ends_the_job(tmp_path: Path) -> None:
    # MWMS_MPI_ABORT_ON_ERROR=0: the failing rank exits after its traceback, as plain Python
    # would; its departure notice still ends the peers' wait.
    result = _run_plain(tmp_path, "raise", env={"MWMS_MPI_ABORT_ON_ERROR": "0"})
    _assert_ended_promptly(result)
    assert "uncaught KeyError" not in result.stderr, result.describe()
    assert "rank 1 left the job" in result.stderr, result.describe()


def test_a_rank_killed_by_a_signal_is_ended_by_the_launcher(tmp_path: Path) -> None:
    # A killed rank sends nothing: the launcher ends the job and reports a death by signal 9.
    # Which process it names is its own affair: hydra names the first one it saw end, which
    # may be a rank it killed while cleaning up (measured), so the rank is not asserted. Intel
    # MPI's hydra writes "KILLED BY SIGNAL: 9", MPICH's "signal 9", Open MPI's "signal 9 (Killed)".
    result = _run_plain(tmp_path, "sigkill")
    _assert_ended_promptly(result)
    assert re.search(r"signal:? 9", result.output, re.I), result.describe()


STAGGERED = """
    import json, sys, time
    import numpy as np
    import mwms_mpi.distribute as ds

    strategy = ds.MultiWorkerMirroredStrategy()
    rank = strategy.cluster_resolver.task_id
    for _ in range(5):
        out = strategy.reduce("sum", strategy.run(lambda: np.ones(3)), axis=None)
    time.sleep(0.4 * (strategy.num_replicas_in_sync - 1 - rank))  # rank 0 finishes last
    print(json.dumps({"rank": rank, "out": out.tolist()}), flush=True)
"""


def test_ranks_that_finish_at_different_times_end_normally(tmp_path: Path) -> None:
    script = write_script(tmp_path, "staggered.py", STAGGERED)
    result = run_mpi(RANKS, [sys.executable, script], timeout=60)
    assert result.returncode == 0, result.describe()
    records = {r["rank"]: r["out"] for r in json_records(result.stdout)}
    assert records == {r: [float(RANKS)] * 3 for r in range(RANKS)}, result.describe()
    assert "[mwms_mpi]" not in result.stderr, result.describe()


POLLING = """
    import json, sys, time
    import numpy as np
    import mwms_mpi.distribute as ds
    from mwms_mpi.errors import UnavailableError

    options = ds.experimental.CommunicationOptions(timeout_seconds=30)
    strategy = ds.MultiWorkerMirroredStrategy(communication_options=options)
    rank = strategy.cluster_resolver.task_id
    strategy.reduce("sum", strategy.run(lambda: np.ones(4)), axis=None)
    if rank == 1:
        sys.exit(0)
    record = {"rank": rank}
    start = time.monotonic()
    try:
        strategy.reduce("sum", strategy.run(lambda: np.ones(4)), axis=None)
    except UnavailableError as exc:
        record.update(error=str(exc), waited=time.monotonic() - start)
    try:
        strategy.reduce("sum", strategy.run(lambda: np.ones(4)), axis=None)
    except UnavailableError as exc:
        record.update(after=str(exc))
    print(json.dumps(record), flush=True)
"""


def test_a_deadline_wait_on_a_lost_rank_raises_unavailable_naming_it(tmp_path: Path) -> None:
    script = write_script(tmp_path, "polling.py", POLLING)
    result = run_mpi(RANKS, [sys.executable, script], timeout=60)
    # The waiters raise long before their 30 s timeout; their communicator keeps the call in
    # flight, so ending the job aborts it (MPI cannot finalize with it), saying why.
    _assert_ended_promptly(result)
    records = {r["rank"]: r for r in json_records(result.stdout)}
    assert records, result.describe()  # the first abort may end the others before they print
    for rank, record in records.items():
        assert record["waited"] < 5, result.describe()
        assert re.match(
            rf"Strategy.reduce \(all_reduce, call \d+\) on rank {rank} of 4 \(communicator "
            r"mwms-strategy\): rank 1 left the job after its call \d+ on this communicator",
            record["error"],
        ), record
        assert "unusable after an earlier failure" in record["after"], record
    assert "poisoned" in result.stderr and "the job is aborted" in result.stderr


AGREED = """
    import time
    import numpy as np
    import mwms_mpi.distribute as ds
    from mwms_mpi._lifecycle import agreed_exit

    strategy = ds.MultiWorkerMirroredStrategy()
    rank = strategy.cluster_resolver.task_id
    strategy.reduce("sum", strategy.run(lambda: np.ones(2)), axis=None)  # all decide to stop
    time.sleep(0.4 * (strategy.num_replicas_in_sync - 1 - rank))  # and leave at different times
    agreed_exit(3)
"""


@pytest.mark.parametrize("runner", [False, True], ids=["plain", "runner"])
def test_an_agreed_exit_is_not_a_loss(tmp_path: Path, runner: bool) -> None:
    script = write_script(tmp_path, "agreed.py", AGREED)
    argv = [sys.executable, *(["-m", "mwms_mpi.run"] if runner else []), script]
    result = run_mpi(RANKS, argv, timeout=60)
    assert result.returncode == 3, result.describe()
    assert "[mwms_mpi]" not in result.stderr and not result.mpi_aborted, result.describe()
