"""``mpiexec -n N python -m pytest --mwms-mpi`` on a user's own tests: one report, no hang.

The user's test files live outside this repository (so this project's conftest is not read)
and pytest-mpi is not asked for: the plugin alone must do it.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

from tests.support.launch import REPO_ROOT, json_records, run_mpi, write_script

pytestmark = pytest.mark.timeout(120)

PYTEST = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--color=no"]


def test_the_documented_example_passes_at_2_and_3_ranks(tmp_path: Path) -> None:
    shutil.copy(REPO_ROOT / "docs" / "examples" / "test_training_step.py", tmp_path)
    for n in (2, 3):
        result = run_mpi(n, [*PYTEST, "--mwms-mpi", f"--mwms-mpi-size={n}"], cwd=tmp_path)
        assert result.returncode == 0, result.describe()
        assert result.stdout.count("1 passed") == 1, result.describe()  # one report


def test_an_assertion_on_one_rank_before_a_collective_aborts_instead_of_hanging(
    tmp_path: Path,
) -> None:
    write_script(
        tmp_path,
        "test_user.py",
        """
        from mpi4py import MPI

        def test_rank_1_fails_while_rank_0_waits_for_it():
            comm = MPI.COMM_WORLD
            assert comm.rank != 1, "rank 1's own assertion"
            comm.Barrier()  # rank 0 waits here for a rank that will never come

        def test_never_reached():
            pass
    """,
    )
    env = {"MWMS_TEST_AGREE_TIMEOUT": "3"}
    result = run_mpi(2, [*PYTEST, "--mwms-mpi"], cwd=tmp_path, env=env, timeout=60)
    assert not result.killed and result.returncode != 0, result.describe()
    assert result.wall_s < 40, result.describe()
    assert "[mwms_mpi.testing] rank 1 of 2: the other ranks did not finish" in result.stderr
    assert "rank 1's own assertion" in result.stderr, result.describe()


def test_a_peer_blocked_outside_mwms_collectives_is_waited_for_and_named(
    tmp_path: Path,
) -> None:
    # Rank 0 waits in a raw mpi4py Barrier: not a collective of mwms_mpi, so rank 1 (failed)
    # cannot know it will never come. It waits MWMS_TEST_AGREE_TIMEOUT, then aborts naming
    # where rank 0 said it was (test_plugin_fail_fast.py: the collective case, in seconds).
    write_script(
        tmp_path,
        "test_user.py",
        """
        import numpy as np
        from mpi4py import MPI

        from mwms_mpi import distribute

        def test_rank_1_fails_while_rank_0_waits_in_raw_mpi():
            strategy = distribute.MultiWorkerMirroredStrategy()
            strategy.reduce("SUM", np.ones(1), axis=None)  # the control channel exists
            assert MPI.COMM_WORLD.rank != 1, "rank 1's own assertion"
            MPI.COMM_WORLD.Barrier()
    """,
    )
    env = {"MWMS_TEST_AGREE_TIMEOUT": "4"}
    result = run_mpi(2, [*PYTEST, "--mwms-mpi"], cwd=tmp_path, env=env, timeout=60)
    assert not result.killed and result.returncode != 0, result.describe()
    assert "rank 1 of 2: the other ranks did not finish this phase within 4 s" in result.stderr
    node = "test_user.py::test_rank_1_fails_while_rank_0_waits_in_raw_mpi"
    assert f"rank 0: in {node} (call), in no collective of mwms_mpi" in result.stderr, (
        result.describe()
    )
    assert "rank 1's own assertion" in result.stderr, result.describe()


def test_failures_on_every_rank_make_one_report(tmp_path: Path) -> None:
    write_script(
        tmp_path,
        "test_user.py",
        """
        from mpi4py import MPI

        def test_fails_everywhere():
            assert MPI.COMM_WORLD.rank == -1, f"rank {MPI.COMM_WORLD.rank} says no"

        def test_skips_on_one_rank():
            import pytest
            if MPI.COMM_WORLD.rank == 1:
                pytest.skip("not on rank 1")

        def test_passes():
            MPI.COMM_WORLD.Barrier()
    """,
    )
    result = run_mpi(2, [*PYTEST, "--mwms-mpi", "-rs"], cwd=tmp_path, timeout=60)
    assert result.returncode == 1, result.describe()
    out = result.stdout
    assert out.count("1 failed, 1 passed, 1 skipped") == 1, result.describe()
    assert "call failed on rank(s) [0, 1] of 2" in out, result.describe()
    assert "rank 0 says no" in out and "rank 1 says no" in out, result.describe()
    assert "skipped on rank(s) [1]: Skipped: not on rank 1" in out, result.describe()


def test_a_world_of_the_wrong_size_is_refused(tmp_path: Path) -> None:
    write_script(tmp_path, "test_user.py", "def test_nothing():\n    pass\n")
    result = run_mpi(2, [*PYTEST, "--mwms-mpi", "--mwms-mpi-size=4"], cwd=tmp_path, timeout=60)
    assert result.returncode != 0, result.describe()
    assert "launched for 4 ranks but this MPI world has 2" in result.output, result.describe()


def test_without_the_flag_the_plugin_stays_out_of_the_way(tmp_path: Path) -> None:
    write_script(
        tmp_path,
        "test_user.py",
        """
        import sys

        def test_no_mpi_imported():
            assert "mpi4py.MPI" not in sys.modules
    """,
    )
    import subprocess

    done = subprocess.run(
        PYTEST, cwd=tmp_path, capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr


# A user's own project: no conftest, no hypothesis profile of its own. Each rank prints one
# record of what it saw (``-s``: the other ranks' reporters are silenced, their prints are not).
USER_PROJECT = """
    import json

    from hypothesis import given
    from hypothesis import strategies as st
    from mpi4py import MPI

    DRAWS = []


    @given(st.lists(st.integers(), max_size=4), st.floats(allow_nan=False))
    def test_draws(xs, x):
        DRAWS.append([xs, x])


    def test_same_draws_and_own_tmp_path(tmp_path, tmp_path_factory):
        comm = MPI.COMM_WORLD
        (tmp_path / "owner").write_text(str(comm.rank))
        comm.Barrier()
        record = {
            "rank": comm.rank,
            "draws": DRAWS,
            "tmp_path": str(tmp_path),
            "basetemp": str(tmp_path_factory.getbasetemp()),
            "owner": (tmp_path / "owner").read_text(),
        }
        print(json.dumps(record), flush=True)
        everyone = comm.allgather(record)
        assert all(r["draws"] == DRAWS for r in everyone), "ranks drew different examples"
        assert len({r["basetemp"] for r in everyone}) == comm.size, "a basetemp is shared"
"""


@pytest.mark.parametrize("load", ["entry point", "-p mwms_mpi.testing"])
def test_a_users_project_gets_per_rank_tmp_paths_and_the_same_draws(
    tmp_path: Path, load: str
) -> None:
    # The user's project lies outside this repository, so this project's conftest (which loads
    # the hypothesis profile itself) is not read: the plugin alone must do both.
    project = tmp_path / "project"
    project.mkdir()
    write_script(project, "test_user.py", USER_PROJECT)
    env = {"MWMS_TEST_MAX_EXAMPLES": "12", "PYTEST_DISABLE_PLUGIN_AUTOLOAD": ""}
    argv = [*PYTEST, "-s", "--mwms-mpi"]
    if load != "entry point":  # pytest's plugin autoload off: the documented `-p`
        env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
        argv = [*PYTEST, "-p", "mwms_mpi.testing", "-s", "--mwms-mpi"]
    result = run_mpi(2, argv, cwd=project, env=env, timeout=60)
    assert result.returncode == 0, result.describe()
    assert result.stdout.count("2 passed") == 1, result.describe()
    records = sorted(json_records(result.stdout), key=lambda r: r["rank"])
    assert [r["rank"] for r in records] == [0, 1], result.describe()
    # identical draws, and the plugin's profile's (MWMS_TEST_MAX_EXAMPLES), not hypothesis's 100
    assert records[0]["draws"] == records[1]["draws"], result.describe()
    assert 1 < len(records[0]["draws"]) <= 12, records[0]["draws"]
    # each rank's own tmp_path, under its own basetemp, with no other rank's files in it. Plain
    # pytest's basetemps differ too (numbered per process, cleaned up by whichever rank comes
    # next: the race the plugin avoids), so the plugin's shows in the name: one per rank.
    bases = [Path(r["basetemp"]) for r in records]
    assert bases[0] != bases[1] and not bases[0].is_relative_to(bases[1]), bases
    assert not bases[1].is_relative_to(bases[0]), bases
    for r, record in enumerate(records):
        assert bases[r].name.endswith(f"-rank{r}"), bases
        assert Path(record["tmp_path"]).is_relative_to(bases[r]), record
        assert record["owner"] == str(r), record
