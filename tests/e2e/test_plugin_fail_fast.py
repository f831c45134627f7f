"""``--mwms-mpi`` fails fast when a rank fails a test before a collective its peers wait in.

A user's own pytest file (outside this repository) where some ranks fail an assertion and the
others go on into ``strategy.reduce``, which the failing ranks never enter. The plugin must end
the job within seconds of the failure (not after ``MWMS_TEST_AGREE_TIMEOUT``, 60 s), with one
pytest-style summary naming the failing ranks, their tracebacks, the test, and where each other
rank is blocked (the test and the collective call, as the stall warnings describe a call). A
peer that is only slow must not be mistaken for a blocked one.
"""

from __future__ import annotations

import re
import sys
import time
from pathlib import Path

import pytest

from tests.support.launch import LaunchResult, run_mpi, write_script

pytestmark = pytest.mark.timeout(180)

PYTEST = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--color=no"]

# The user's file: FAILING names the ranks that fail the second test before its reduce. Each
# failing rank stamps the moment it fails, so the test bounds the time from the failure to the
# end of the job (startup under load is not the plugin's to bound).
USER_TESTS = """
    import os
    import time
    from pathlib import Path

    import numpy as np
    import pytest

    from mwms_mpi import distribute

    FAILING = {failing}
    SLOW_PEER_S = {slow}


    @pytest.fixture(scope="module")
    def strategy():
        return distribute.MultiWorkerMirroredStrategy()


    def rank_of(strategy):
        return strategy.cluster_resolver.task_id


    def test_a_reduce_that_passes(strategy):
        total = strategy.reduce("SUM", np.ones(2), axis=None)
        assert total.tolist() == [strategy.num_replicas_in_sync] * 2


    def test_some_ranks_fail_before_a_reduce(strategy):
        rank = rank_of(strategy)
        if rank in FAILING:
            Path(os.environ["STAMPS"], f"failed-{{rank}}").write_text(repr(time.time()))
            assert rank == -1, f"rank {{rank}}'s own assertion"
        if SLOW_PEER_S:  # a slow peer: it calls no collective, it only arrives late
            time.sleep(SLOW_PEER_S)
            return
        strategy.reduce("SUM", np.ones(2), axis=None)  # the failing ranks never come here


    def test_after(strategy):
        strategy.reduce("SUM", np.ones(2), axis=None)
"""


def run_user_tests(
    tmp_path: Path, n: int, failing: list[int], slow: float = 0.0
) -> tuple[LaunchResult, float]:
    """Runs the user's file at ``n`` ranks; returns the result and the seconds from the first
    failure to the end of the job."""
    stamps = tmp_path / "stamps"
    stamps.mkdir()
    project = tmp_path / "project"
    project.mkdir()
    write_script(project, "test_user.py", USER_TESTS.format(failing=failing, slow=slow))
    env = {"STAMPS": str(stamps), "MWMS_TEST_AGREE_TIMEOUT": "60"}
    result = run_mpi(n, [*PYTEST, "--mwms-mpi"], cwd=project, env=env, timeout=120)
    ended = time.time()
    failed_at = [float(p.read_text()) for p in stamps.iterdir()]
    assert sorted(int(p.name.split("-")[1]) for p in stamps.iterdir()) == failing, result.describe()
    return result, ended - min(failed_at)


NODE = "test_user.py::test_some_ranks_fail_before_a_reduce"
CLOSING = r"(?m)^{} in [\d.]+s$"  # pytest's closing line under -q


def check_summary(result: LaunchResult, n: int, failing: list[int]) -> None:
    """One summary on stdout: the test, the failing ranks and their texts, every other rank's
    position, the tally; and the job ended by an abort that says why."""
    out = result.stdout
    assert out.count("short test summary info") == 1, result.describe()
    assert out.count(f"FAILED {NODE}") == 1, result.describe()
    assert out.count(f"failed on rank(s) {failing} of {n}") >= 1, result.describe()
    for rank in failing:
        assert f"rank {rank}'s own assertion" in out, result.describe()
    for rank in sorted(set(range(n)) - set(failing)):
        position = re.compile(
            rf"rank {rank}: in {re.escape(NODE)} \(call\), blocked in "
            r"Strategy\.reduce \(all_reduce, call \d+\)"
        )
        assert position.search(out), result.describe()
    assert len(re.findall(CLOSING.format("1 failed, 1 passed"), out)) == 1, result.describe()
    assert "test_after" not in out, result.describe()  # the job ended there
    assert "[mwms_mpi.testing]" in result.stderr, result.describe()


@pytest.mark.parametrize("failing", [[1], [0]], ids=["rank-1-fails", "rank-0-fails"])
def test_one_rank_failing_before_a_reduce_ends_the_job_fast_with_one_summary(
    tmp_path: Path, failing: list[int]
) -> None:
    result, since_failure = run_user_tests(tmp_path, 2, failing)
    assert not result.killed and result.returncode != 0, result.describe()
    assert since_failure < 10, f"{since_failure:.1f} s after the failure\n{result.describe()}"
    check_summary(result, 2, failing)


def test_two_of_four_ranks_failing_make_one_summary(tmp_path: Path) -> None:
    result, since_failure = run_user_tests(tmp_path, 4, [1, 3])
    assert not result.killed and result.returncode != 0, result.describe()
    assert since_failure < 10, f"{since_failure:.1f} s after the failure\n{result.describe()}"
    check_summary(result, 4, [1, 3])


def test_a_slow_peer_is_not_taken_for_a_blocked_one(tmp_path: Path) -> None:
    # Rank 0 arrives 4 s late, in no collective: rank 1 asks where it is and keeps waiting.
    result, _ = run_user_tests(tmp_path, 2, [1], slow=4.0)
    assert result.returncode == 1, result.describe()
    out = result.stdout
    assert re.search(CLOSING.format("1 failed, 2 passed"), out), result.describe()
    assert "call failed on rank(s) [1] of 2" in out, result.describe()
    assert "[mwms_mpi.testing]" not in result.output, result.describe()


def test_one_rank_world_reports_a_failure_as_plain_pytest(tmp_path: Path) -> None:
    result, _ = run_user_tests(tmp_path, 1, [0])
    assert result.returncode == 1, result.describe()
    assert re.search(CLOSING.format("1 failed, 2 passed"), result.stdout), result.describe()
    assert "[mwms_mpi.testing]" not in result.output, result.describe()
