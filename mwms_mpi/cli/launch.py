"""``mwms-mpi launch``: a program on N ranks, through this environment's ``mpiexec`` and the
runner, with the flags a lost rank needs to be survived (``--elastic``).

The fault-tolerance flags belong to the launcher's command line, not to the program: with
``--elastic`` under Open MPI this runs ``mpiexec --with-ft ulfm`` with the heartbeat failure
detector's flags (``--mca mpi_ft_detector true`` and its period and timeout) ``-n N python
-m mwms_mpi.run --elastic program ...`` (docs/elastic.md).
Under an MPI without working ULFM (MPICH, Intel MPI) it says once that a lost rank will end
the job, and launches as without ``--elastic``.
"""

from __future__ import annotations

import shlex
import subprocess
import sys
from collections.abc import Sequence

from mwms_mpi import _env
from mwms_mpi.cluster.mpiexec import DEFAULT_DETECTOR, FailureDetector, probe

PROG = "mwms-mpi launch"


def main(
    n: int,
    program: Sequence[str],
    elastic: bool,
    timeout: float | None,
    detector: FailureDetector = DEFAULT_DETECTOR,
) -> int:
    """Runs ``program`` (a script and its arguments, or ``-m module ...``) on ``n`` ranks;
    returns the launcher's exit status. With ``elastic``, ``detector`` (default Open MPI's
    settings) finds a frozen rank."""
    launcher = probe()
    can_survive = launcher.family.fault_tolerance_flags is not None
    if elastic and not can_survive:
        print(
            f"{PROG}: --elastic needs Open MPI with ULFM (mpiexec --with-ft ulfm); "
            f"{launcher.family.name}'s mpiexec has none, so a lost rank ends the job (a restart "
            "resumes from the last checkpoint)",
            file=sys.stderr,
        )
    runner = [sys.executable, "-m", "mwms_mpi.run", *(["--elastic"] if elastic else [])]
    command = launcher.command(
        n,
        [*runner, *program],
        timeout,
        fault_tolerant=elastic and can_survive,
        detector=detector,
    )
    print(f"+ {shlex.join(command.args)}", file=sys.stderr, flush=True)
    env = _env.child_environ(command.env)
    return subprocess.run(command.args, env=env, check=False).returncode
