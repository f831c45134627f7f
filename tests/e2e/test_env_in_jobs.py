"""A bad variable in a launched job ends it at once, on every rank, naming the variable.

Issue 23, item 11. Each of these was taken in silence before: ``MWMS_MPI_ABORT_ON_ERROR=maybe``
as on, ``MWMS_MPI_LOG_LEVEL=nonsense`` as ``WARNING``, ``MWMS_MPI_CUDA_AWARE=maybe`` as "ask the
library", and ``MWMS_MPI_RUN_INIT_TIMEOUT``/``MWMS_MPI_TIMELINE_WAIT`` fell back to their
defaults; ``MWMS_MPI_STALL_WARNING=abc`` failed with ``could not convert string to float``,
naming nothing. Each runs the documented launch (``mpiexec -n 2 python -m mwms_mpi.run``); the
readers' rules are tested one by one in ``tests/unit/test_env_validation.py``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.launch import run_python_mpi, write_script

pytestmark = pytest.mark.timeout(180)

PROGRAM = """
    import numpy as np
    import mwms_mpi.distribute as dist

    print("program started", flush=True)
    strategy = dist.MultiWorkerMirroredStrategy()
    total = strategy.reduce("SUM", strategy.run(lambda: np.ones(4, np.float32)), axis=None)
    print("program ended", total, flush=True)
"""


@pytest.mark.parametrize(
    ("variable", "value", "expected", "starts"),
    [
        # read on `import mwms_mpi` (the runner imports it): the program never starts
        ("MWMS_MPI_ABORT_ON_ERROR", "maybe", "is not a boolean", False),
        ("MWMS_MPI_LOG_LEVEL", "nonsense", "is not a level", False),
        # read by the runner before it starts the program (it is needed on the failure path)
        ("MWMS_MPI_RUN_INIT_TIMEOUT", "soon", "is not a number >= 1", False),
        # read when the strategy's communicator is built, on every rank
        ("MWMS_MPI_STALL_WARNING", "abc", "is not a number >= 0", True),
        ("MWMS_MPI_CUDA_AWARE", "maybe", "is not a boolean", True),
        ("MWMS_MPI_TIMELINE_WAIT", "x", "is not a number >= 0", True),
    ],
)
def test_a_bad_value_ends_the_job_naming_the_variable(
    tmp_path: Path, variable: str, value: str, expected: str, starts: bool
) -> None:
    script = write_script(tmp_path, "prog.py", PROGRAM)
    env = {variable: value, "MWMS_MPI_TIMELINE": str(tmp_path / "trace.json")}
    if variable != "MWMS_MPI_TIMELINE_WAIT":
        del env["MWMS_MPI_TIMELINE"]
    result = run_python_mpi(2, script, env=env, timeout=60)
    assert result.returncode != 0, result.describe()
    assert f"Environment variable {variable}={value!r} {expected}" in result.stderr, (
        result.describe()
    )
    assert ("program started" in result.stdout) == starts, result.describe()
    assert "program ended" not in result.stdout, result.describe()
    assert result.wall_s < 45 and not result.killed, result.describe()
