"""End-to-end failures of the collective layer: each ends with a clear error on every rank.

These run ``mpiexec`` as a subprocess: a timed-out collective leaves the job poisoned (MPI cannot
cancel it), so it cannot share a process with the test runner (docs/architecture.md, "Traps").
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.launch import child_env, json_records, run_python_mpi, write_script

pytestmark = pytest.mark.timeout(120)

TIMEOUT_S = 3.0
# Rank 1's sleep in SKIPPER and the launcher's whole-job limit: without a working deadline the
# others would wait in the collective until rank 1 ends or the launcher ends the job, so at
# least HANG_S. A timeout is therefore told from a hang by elapsed < HANG_S / 2: 27 s of slack
# over TIMEOUT_S, which 4 ranks on 2 loaded cores do not use up (polling sleeps 1 ms at most),
# and still 30 s short of what a hang would show. Only the lower bound, which load cannot
# break, pins the timeout's value.
HANG_S = 60.0

SKIPPER = """
    import json, sys, time
    import numpy as np
    from mwms_mpi.collective import Communicator
    from mwms_mpi.errors import DeadlineExceededError, UnavailableError
    from mwms_mpi.types import CommunicationOptions

    timeout, hang = float(sys.argv[1]), float(sys.argv[2])
    comm = Communicator(options=CommunicationOptions(timeout_seconds=timeout), name="e2e")
    warm = comm.all_reduce(np.ones(8, dtype=np.float32))  # a layout every rank has seen
    record = {"rank": comm.rank, "warm": warm.tolist()}
    if comm.rank == 1:
        record["skipped"] = True  # rank 1 never joins the next collective
        print(json.dumps(record), flush=True)
        time.sleep(hang)  # ended by the others' abort
    else:
        start = time.monotonic()
        try:
            comm.all_reduce(np.ones(8, dtype=np.float32))
        except DeadlineExceededError as exc:
            record.update(error="DeadlineExceededError", message=str(exc), op=exc.op,
                          elapsed=time.monotonic() - start)
        try:
            comm.barrier()
        except UnavailableError as exc:
            record["after"] = str(exc)
    print(json.dumps(record), flush=True)
    time.sleep(0.5)  # every rank prints before the first one's end aborts the job
    # ending with a poisoned communicator: the library aborts the job, saying why
"""

MISMATCH = """
    import json
    import numpy as np
    from mwms_mpi.collective import Communicator
    from mwms_mpi.errors import InvalidArgumentError

    comm = Communicator(name="e2e")
    cols = 5 if comm.rank == 1 else 4
    record = {"rank": comm.rank}
    try:
        comm.all_reduce(np.ones((3, cols), dtype=np.float32))
    except InvalidArgumentError as exc:
        record.update(error="InvalidArgumentError", message=str(exc))
    record["after"] = comm.all_reduce(np.ones(2)).tolist()  # still usable
    print(json.dumps(record), flush=True)
    comm.close()
"""


@pytest.mark.parametrize("ranks", [2, 4])
def test_a_rank_that_skips_a_collective_times_out_the_others(tmp_path: Path, ranks: int) -> None:
    script = write_script(tmp_path, "skipper.py", SKIPPER)
    result = run_python_mpi(ranks, script, [str(TIMEOUT_S), str(HANG_S)], timeout=HANG_S)
    assert not result.killed and result.returncode != 0, result.describe()
    assert "poisoned" in result.stderr and "so the job is aborted" in result.stderr
    records = {r["rank"]: r for r in json_records(result.stdout)}
    assert sorted(records) == list(range(ranks)), result.describe()
    for rank, record in records.items():
        assert record["warm"] == [float(ranks)] * 8
        if rank == 1:
            continue
        assert record["error"] == "DeadlineExceededError", result.describe()
        assert TIMEOUT_S <= record["elapsed"] < HANG_S / 2, record
        assert record["op"] == "all_reduce"
        assert (
            f"all_reduce (call 2) on rank {rank} of {ranks} (communicator e2e)"
            in (record["message"])
        )
        assert "timed out after" in record["message"]
        assert "unusable" in record["after"] and "barrier" in record["after"]
    assert result.wall_s < HANG_S, result.describe()  # the abort ended rank 1's sleep


@pytest.mark.parametrize("ranks", [2, 4])
def test_a_shape_mismatch_raises_on_every_rank(tmp_path: Path, ranks: int) -> None:
    script = write_script(tmp_path, "mismatch.py", MISMATCH)
    result = run_python_mpi(ranks, script, timeout=60)
    assert result.returncode == 0 and not result.killed, result.describe()
    records = {r["rank"]: r for r in json_records(result.stdout)}
    assert sorted(records) == list(range(ranks)), result.describe()
    for rank, record in records.items():
        assert record["error"] == "InvalidArgumentError"
        message = record["message"]
        assert message.startswith(f"all_reduce on rank {rank}: shape "), message
        assert "(3, 4) float32" in message and "(3, 5) float32" in message
        assert record["after"] == [float(ranks)] * 2


LATE = """
    import time
    import numpy as np
    from mwms_mpi.collective import Communicator

    comm = Communicator(name="e2e")
    if comm.rank == 1:
        time.sleep(4)  # the others wait in a blocking all_reduce (no timeout)
    out = comm.all_reduce(np.ones(3, dtype=np.float32))
    print("done", comm.rank, out.tolist(), flush=True)
    comm.close()
"""


def test_a_long_blocking_wait_is_named_by_the_stall_watch(tmp_path: Path) -> None:
    script = write_script(tmp_path, "late.py", LATE)
    result = run_python_mpi(2, script, timeout=60, env={"MWMS_MPI_STALL_WARNING": "1"})
    assert result.returncode == 0, result.describe()
    assert result.stdout.count("done") == 2
    assert "all_reduce (call 1) on rank 0 of 2 (communicator e2e) has waited" in result.stderr, (
        result.describe()
    )
    assert "rank 1 of 2" not in result.stderr  # rank 1 never waited


def test_a_communicator_refuses_a_one_rank_world_under_a_launcher_that_asked_for_more(
    tmp_path: Path,
) -> None:
    # A foreign launcher (here Open MPI's variables around an MPICH-linked process) starts
    # one-rank worlds; the communicator refuses instead of computing alone, as the strategy does.
    script = write_script(
        tmp_path,
        "foreign.py",
        """
        from mwms_mpi.collective import Communicator
        Communicator()
        """,
    )
    env = child_env({"OMPI_COMM_WORLD_SIZE": "4", "OMPI_COMM_WORLD_RANK": "2"})
    result = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=60
    )
    assert result.returncode != 0
    assert "The launcher started 4 processes (OMPI_COMM_WORLD_SIZE=4" in result.stderr
    assert "RuntimeError" in result.stderr
