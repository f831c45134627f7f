"""``python -m mwms_mpi.run``: a failing rank ends the whole job promptly, with its traceback.

Serial tests: each launches ``mpiexec`` as a subprocess (this process never imports
``mpi4py.MPI``) and checks the exit code, the output and the wall time (docs/architecture.md,
"Failure").
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from mwms_mpi import run
from tests.support.launch import (
    LaunchResult,
    child_env,
    json_records,
    run_mpi,
    run_python_mpi,
    write_script,
)

# The job must end well before this; the launcher's whole-job limit is set to it as a backstop.
PROMPT_S = 30.0

pytestmark = pytest.mark.timeout(90)

# Rank 1 raises only once every other rank has announced (with a marker file) that it is
# entering the Barrier, so the abort must reach ranks really blocked in a collective.
RAISE_WHILE_OTHERS_WAIT = """
    import sys, time
    from pathlib import Path
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    markers = Path(sys.argv[1])

    def divide(x):
        return x / 0

    if comm.rank == 1:
        deadline = time.monotonic() + 20
        while len(list(markers.iterdir())) < comm.size - 1 and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.2)
        divide(comm.rank)
    (markers / f"rank{comm.rank}").touch()
    comm.Barrier()
    print("unreachable: barrier passed", flush=True)
"""


def _assert_aborted_promptly(result: LaunchResult, by_mpi_abort: bool = True) -> None:
    """Non-zero exit, ended by the abort (not by the launcher's time limit or our kill), in time.

    ``by_mpi_abort``: whether the launcher must have reported ``MPI_Abort`` (a rank whose MPI
    never started ends without it).
    """
    assert result.returncode != 0, result.describe()
    assert not result.killed, result.describe()
    assert not result.launcher_timed_out, result.describe()
    if by_mpi_abort and not result.mpi_aborted:
        # Under load hydra was seen to drop the MPI library's own "application called
        # MPI_Abort" line (CI, once in two runs, with other jobs on the 2-core machine): the
        # package's line, written just before MPI_Abort, stands in for it, as long as the
        # launcher did not report a rank that simply exited (which it words differently).
        assert "aborting the job" in result.stderr, result.describe()
        assert "BAD TERMINATION" not in result.output, result.describe()
    else:
        assert result.mpi_aborted == by_mpi_abort, result.describe()
    assert result.wall_s < PROMPT_S, result.describe()


def test_uncaught_exception_on_one_rank_aborts_ranks_waiting_in_barrier(tmp_path: Path) -> None:
    script = write_script(tmp_path, "raise_on_rank1.py", RAISE_WHILE_OTHERS_WAIT)
    markers = tmp_path / "markers"
    markers.mkdir()
    result = run_python_mpi(4, script, [str(markers)], timeout=PROMPT_S)

    _assert_aborted_promptly(result)
    assert sorted(p.name for p in markers.iterdir()) == ["rank0", "rank2", "rank3"]
    assert "[mwms_mpi.run] rank 1 of 4: uncaught ZeroDivisionError, aborting the job" in (
        result.stderr
    ), result.describe()
    assert "rank 1: Traceback (most recent call last):" in result.stderr
    line = script.read_text().splitlines().index("    return x / 0") + 1
    assert f'raise_on_rank1.py", line {line}, in divide' in result.stderr
    assert "rank 1:     return x / 0" in result.stderr
    assert "rank 1: ZeroDivisionError: division by zero" in result.stderr
    assert "runpy" not in result.stderr  # the runner's own frames are trimmed
    assert "unreachable" not in result.stdout


def test_exception_before_mpi_is_initialised_still_aborts(tmp_path: Path) -> None:
    script = write_script(
        tmp_path,
        "raise_before_mpi.py",
        """
        from mwms_mpi.cluster.launcher import detect_launcher

        if detect_launcher().rank == 1:  # the launcher's variables: MPI is not started yet
            raise RuntimeError("failed before touching MPI")
        from mpi4py import MPI

        MPI.COMM_WORLD.Barrier()
        """,
    )
    result = run_python_mpi(4, script, timeout=PROMPT_S)

    _assert_aborted_promptly(result)
    assert "rank 1 of 4: uncaught RuntimeError, aborting the job" in result.stderr
    assert "RuntimeError: failed before touching MPI" in result.stderr


def test_watchdog_ends_a_rank_whose_peers_never_start_mpi(tmp_path: Path) -> None:
    # Rank 1 fails before MPI and the others exit without ever initialising it: MPI_Init on
    # the failing rank cannot complete, so the watchdog must end it with a non-zero status.
    script = write_script(
        tmp_path,
        "peers_never_use_mpi.py",
        """
        from mwms_mpi.cluster.launcher import detect_launcher

        if detect_launcher().rank == 1:
            raise RuntimeError("nobody else uses MPI")
        """,
    )
    result = run_python_mpi(2, script, timeout=PROMPT_S, env={run.INIT_TIMEOUT_VARIABLE: "2"})

    _assert_aborted_promptly(result, by_mpi_abort=False)
    assert "rank 1 of 2: uncaught RuntimeError" in result.stderr, result.describe()
    assert "giving up after 2s" in result.stderr


def test_successful_script_exits_zero_with_its_output(tmp_path: Path) -> None:
    script = write_script(
        tmp_path,
        "ok.py",
        """
        import numpy as np
        from mpi4py import MPI

        comm = MPI.COMM_WORLD
        total = np.zeros(1)
        comm.Allreduce(np.array([comm.rank + 1.0]), total)
        print(f"rank {comm.rank} of {comm.size}: total={total[0]:g} name={__name__}")
        """,
    )
    result = run_python_mpi(4, script, timeout=PROMPT_S)

    assert result.returncode == 0, result.describe()
    for rank in range(4):
        assert f"rank {rank} of 4: total=10 name=__main__" in result.stdout, result.describe()
    assert "mwms_mpi.run" not in result.stderr


def test_module_form_runs_module_as_main(tmp_path: Path) -> None:
    write_script(
        tmp_path,
        "mwms_e2e_module.py",
        """
        import json
        import sys
        from mpi4py import MPI

        if __name__ == "__main__":
            print(json.dumps({"rank": MPI.COMM_WORLD.rank, "argv": sys.argv}))
        """,
    )
    argv = [sys.executable, "-m", "mwms_mpi.run", "-m", "mwms_e2e_module", "--lr", "0.1"]
    result = run_mpi(2, argv, timeout=PROMPT_S, cwd=tmp_path)

    assert result.returncode == 0, result.describe()
    records = json_records(result.stdout)
    assert sorted(record["rank"] for record in records) == [0, 1]
    for record in records:
        assert record["argv"] == [str(tmp_path / "mwms_e2e_module.py"), "--lr", "0.1"]


def test_module_form_failure_aborts(tmp_path: Path) -> None:
    write_script(
        tmp_path,
        "mwms_e2e_failing_module.py",
        """
        from mpi4py import MPI

        if MPI.COMM_WORLD.rank == 0:
            raise KeyError("missing")
        MPI.COMM_WORLD.Barrier()
        """,
    )
    argv = [sys.executable, "-m", "mwms_mpi.run", "-m", "mwms_e2e_failing_module"]
    result = run_mpi(2, argv, timeout=PROMPT_S, cwd=tmp_path)

    _assert_aborted_promptly(result)
    assert "rank 0 of 2: uncaught KeyError, aborting the job" in result.stderr


def test_nonzero_sys_exit_on_one_rank_aborts(tmp_path: Path) -> None:
    script = write_script(
        tmp_path,
        "exit3.py",
        """
        import sys
        from mpi4py import MPI

        if MPI.COMM_WORLD.rank == 2:
            sys.exit(3)
        MPI.COMM_WORLD.Barrier()
        """,
    )
    result = run_python_mpi(4, script, timeout=PROMPT_S)

    _assert_aborted_promptly(result)
    assert result.returncode == 3, result.describe()
    assert "rank 2 of 4: sys.exit(3), aborting the job" in result.stderr


def test_sys_exit_zero_everywhere_is_success(tmp_path: Path) -> None:
    script = write_script(
        tmp_path,
        "exit0.py",
        """
        import sys
        from mpi4py import MPI

        MPI.COMM_WORLD.Barrier()
        sys.exit(0 if MPI.COMM_WORLD.rank else None)
        """,
    )
    result = run_python_mpi(2, script, timeout=PROMPT_S)

    assert result.returncode == 0, result.describe()


def test_an_agreed_exit_ends_every_rank_with_its_code_and_no_abort(tmp_path: Path) -> None:
    script = write_script(
        tmp_path,
        "agreed.py",
        """
        from mpi4py import MPI
        from mwms_mpi._lifecycle import agreed_exit

        MPI.COMM_WORLD.Barrier()  # every rank has decided to stop here
        agreed_exit(42)
        """,
    )
    result = run_python_mpi(2, script, timeout=PROMPT_S)

    assert result.returncode == 42, result.describe()
    assert "aborting" not in result.stderr and not result.mpi_aborted, result.describe()


def test_arguments_are_passed_through_as_sys_argv(tmp_path: Path) -> None:
    script = write_script(
        tmp_path,
        "argv.py",
        """
        import json
        import sys

        from mwms_mpi.cluster.launcher import detect_launcher

        print(json.dumps({"rank": detect_launcher().rank, "argv": sys.argv,
                          "path0": sys.path[0]}))
        """,
    )
    args = ["--epochs", "3", "two words", "-m", "--"]
    result = run_python_mpi(2, script, args, timeout=PROMPT_S)

    assert result.returncode == 0, result.describe()
    records = json_records(result.stdout)
    assert sorted(record["rank"] for record in records) == [0, 1], result.describe()
    for record in records:
        assert record["argv"] == [str(script), *args]
        assert record["path0"] == str(tmp_path.resolve())  # as `python script.py` sets it


def _run_serial(*args: str) -> subprocess.CompletedProcess[str]:
    """``python -m mwms_mpi.run ...`` without a launcher (so MPI is never initialised)."""
    return subprocess.run(
        [sys.executable, "-m", "mwms_mpi.run", *args],
        capture_output=True,
        text=True,
        timeout=PROMPT_S,
        env=child_env(),
        stdin=subprocess.DEVNULL,
    )


def test_without_launcher_failure_exits_with_status_and_never_starts_mpi(tmp_path: Path) -> None:
    script = write_script(
        tmp_path,
        "serial_fail.py",
        """
        import sys
        raise ValueError("serial")
        """,
    )
    result = _run_serial(str(script))

    assert result.returncode == 1, result.stderr
    assert "rank 0 of 1: uncaught ValueError, exiting with status 1" in result.stderr
    assert "ValueError: serial" in result.stderr
    assert "Abort" not in result.stderr


def test_help_and_usage_errors() -> None:
    helped = _run_serial("--help")
    assert helped.returncode == 0
    assert "usage: python -m mwms_mpi.run [--elastic] <script.py>" in helped.stdout
    assert "--elastic   under `mpiexec --with-ft ulfm`" in helped.stdout
    assert "MPI_Abort" in helped.stdout

    bare = _run_serial()
    assert bare.returncode == 2
    assert "no script or module given" in bare.stderr

    missing = _run_serial("-m")
    assert missing.returncode == 2
    assert "argument expected for option -m" in missing.stderr


def test_parse_args() -> None:
    assert run.parse_args(["--help"]) is None
    assert run.parse_args(["a.py", "-m", "x"]) == run.Program("path", "a.py", ("-m", "x"))
    assert run.parse_args(["-m", "pkg.mod", "1"]) == run.Program("module", "pkg.mod", ("1",))
    assert run.parse_args(["-c", "pass"]) == run.Program("command", "pass")
    with pytest.raises(run.UsageError, match="unknown option --bogus"):
        run.parse_args(["--bogus"])
    elastic = run.parse_args(["--elastic", "a.py", "--elastic"])
    assert elastic == run.Program("path", "a.py", ("--elastic",), elastic=True)
    assert run.parse_args(["--elastic", "-m", "pkg"]) == run.Program("module", "pkg", (), True)
    assert run.parse_args(["--elastic", "--help"]) is None
    with pytest.raises(run.UsageError, match="no script or module given"):
        run.parse_args(["--elastic"])


def test_main_in_process_runs_script_and_restores_argv(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    script = write_script(
        tmp_path,
        "inproc.py",
        """
        import sys
        print("argv", sys.argv[1:], __name__)
        sys.exit(0)
        """,
    )
    saved = sys.argv[:]

    assert run.main([str(script), "x"]) == 0
    assert sys.argv == saved
    assert "argv ['x'] __main__" in capsys.readouterr().out
