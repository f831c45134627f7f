"""``mwms-mpi`` (also ``python -m mwms_mpi``): the command for the people who run jobs.

    mwms-mpi info                 what MPI, launcher and ranks this job has (run it under
                                  mpiexec/srun: one table, printed by rank 0)
    mwms-mpi bench [--plot P]     the collective benchmark: ours against raw mpi4py
    mwms-mpi run script.py ...    = python -m mwms_mpi.run script.py ...
    mwms-mpi launch -n N [--elastic] script.py ...
                                  mpiexec -n N python -m mwms_mpi.run script.py ..., with
                                  --elastic the flags that survive a lost rank (Open MPI)
    mwms-mpi timeline merge T     merge the per-rank timeline files of trace T

Each subcommand lives in its own module and is imported only when it runs, so ``--help``
never starts MPI.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from mwms_mpi.cli._version import version

PROG = "mwms-mpi"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="TensorFlow's MultiWorkerMirroredStrategy over MPI: diagnostics, benchmark, "
        "runner. Run `info` and `bench` under mpiexec or srun to see every rank.",
    )
    parser.add_argument("--version", action="version", version=f"mwms_mpi {version()}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    info = commands.add_parser(
        "info", help="MPI library, launcher and a table of every rank (the first thing to run)"
    )
    info.add_argument("--json", action="store_true", help="print JSON instead of the table")
    bench = commands.add_parser("bench", help="collective speed against raw mpi4py")
    bench.add_argument("--quick", action="store_true", help="fewer iterations (a smoke run)")
    bench.add_argument("--json-only", action="store_true", help="the JSON records, no table")
    bench.add_argument(
        "--plot", metavar="PNG", help="also plot each variant's ratio to its own raw baseline"
    )
    bench.add_argument(
        "--model",
        choices=("collectives", "cnn"),
        default="collectives",
        help="cnn: the JAX CNN's training step split into its parts (needs the [jax] extra)",
    )
    commands.add_parser(
        "run",
        help="run a script, aborting the job if any rank fails (= python -m mwms_mpi.run)",
        add_help=False,
    )
    launch = commands.add_parser(
        "launch",
        help="mpiexec -n N python -m mwms_mpi.run PROGRAM, --elastic to survive a lost rank",
    )
    launch.add_argument("-n", type=int, required=True, help="the number of ranks")
    launch.add_argument(
        "--elastic",
        action="store_true",
        help="survive a lost rank: mpiexec --with-ft ulfm (Open MPI) and the runner's --elastic",
    )
    launch.add_argument("--timeout", type=float, default=None, help="the job's limit in seconds")
    launch.add_argument(
        "--detector-timeout",
        type=float,
        default=10.0,
        metavar="S",
        help="--elastic: a rank silent this long is declared failed (default: 10, Open MPI's)",
    )
    launch.add_argument(
        "--detector-period",
        type=float,
        default=None,
        metavar="S",
        help="--elastic: seconds between heartbeats (default: 3, or a quarter of the timeout)",
    )
    launch.add_argument("program", nargs=argparse.REMAINDER, help="script.py [arg ...]")
    timeline = commands.add_parser("timeline", help="work with MWMS_MPI_TIMELINE traces")
    actions = timeline.add_subparsers(dest="action", metavar="ACTION", required=True)
    merge = actions.add_parser(
        "merge", help="merge trace.rank<r>.json files (left by a job that did not end normally)"
    )
    merge.add_argument("trace", help="the trace the job was asked to write (MWMS_MPI_TIMELINE)")
    summary = actions.add_parser("summary", help="per rank: calls, time agreeing, waiting")
    summary.add_argument("trace", help="a merged trace file")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the command line ``argv`` (default ``sys.argv[1:]``); returns the exit status."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["run"]:  # everything after `run` is the program's, as for python -m
        from mwms_mpi import run

        return run.main(args[1:])
    options = _parser().parse_args(args)
    if options.command == "info":
        from mwms_mpi.cli import info

        return info.main(as_json=options.json)
    if options.command == "bench" and options.model == "cnn":
        from mwms_mpi.cli import bench_cnn

        return bench_cnn.run(steps=40 if options.quick else 400, json_only=options.json_only)
    if options.command == "launch":
        from mwms_mpi.cli import launch
        from mwms_mpi.cluster.mpiexec import FailureDetector

        if not options.program or options.n < 1:
            _parser().error("launch needs -n N (at least 1) and a program")
        try:
            detector = FailureDetector(options.detector_timeout, options.detector_period)
        except ValueError as exc:
            _parser().error(str(exc))
        return launch.main(options.n, options.program, options.elastic, options.timeout, detector)
    if options.command == "bench":
        from mwms_mpi.cli import bench

        return bench.run(quick=options.quick, json_only=options.json_only, plot=options.plot)
    from mwms_mpi.cli import traces

    if options.action == "merge":
        return traces.merge_command(options.trace)
    return traces.summary_command(options.trace)
