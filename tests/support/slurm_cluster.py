"""A private two-node Slurm on this machine, for CI: install, start, wait until idle, stop.

    python -m tests.support.slurm_cluster up DIR     # exit 0: idle; prints `export SLURM_CONF=...`
    python -m tests.support.slurm_cluster down DIR   # stops what `up` started, by its PIDs

Debian's ``slurm-wlm`` (slurmctld, slurmd, the clients) and ``munge`` are installed with apt
when missing (as root; about 12 s: docs/testing.md, "The local Slurm cluster"). Everything else
is private to ``DIR``, so two runs on one machine, or a Slurm someone else started, never meet:
the configuration (``SLURM_CONF`` points the clients at it), state and spool directories, logs,
pid files, free ports for the controller and the nodes, and a munge daemon of its own on its own
socket. Two ``slurmd`` with the node names ``node01`` and ``node02`` run on this one host, so
jobs see real multi-node variables (``SLURM_JOB_NODELIST=node[01-02]``,
``SLURM_TASKS_PER_NODE=2(x2)``).

"Up" means ``sinfo`` shows both nodes idle within :data:`IDLE_WAIT_S` seconds; every other wait
is bounded too. Whatever fails is said in one line on stderr (exit 1), and ``down`` stops
whatever did start.
"""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

IDLE_WAIT_S = 60.0
INSTALL_TIMEOUT_S = 600.0
PACKAGES = ("slurmctld", "slurmd", "slurm-client", "munge")
NODES = ("node01", "node02")
MUNGE_KEY = Path("/etc/munge/munge.key")


class NotStarted(Exception):
    """Slurm cannot be started here; the message says why."""


def _run(args: list[str], timeout: float, **kwargs: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        args, capture_output=True, text=True, timeout=timeout, check=False, **kwargs
    )  # type: ignore[call-overload]


def install() -> None:
    """Installs the Slurm and munge packages with apt if the daemons are missing."""
    if shutil.which("slurmctld") and shutil.which("slurmd") and shutil.which("munged"):
        return
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        raise NotStarted("Slurm is not installed and apt-get cannot be run as root here")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for args in (["apt-get", "update"], ["apt-get", "install", "-y", *PACKAGES]):
        try:
            done = _run(args, INSTALL_TIMEOUT_S, env=env)
        except subprocess.TimeoutExpired:
            raise NotStarted(f"`{' '.join(args)}` took over {INSTALL_TIMEOUT_S:g} s") from None
        if done.returncode != 0:
            tail = (done.stderr or done.stdout).strip().splitlines()[-1:]
            raise NotStarted(f"`{' '.join(args)}` failed: {tail}")


def _free_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def config(root: Path, ports: list[int]) -> str:
    """The slurm.conf of the private cluster: controller port, two nodes, one partition."""
    nodes = "\n".join(
        f"NodeName={name} NodeHostname=localhost NodeAddr=127.0.0.1 Port={port} CPUs=4 "
        "RealMemory=2000 State=UNKNOWN"
        for name, port in zip(NODES, ports[1:], strict=True)
    )
    return f"""\
ClusterName=mwmsci
SlurmctldHost=localhost
SlurmctldPort={ports[0]}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={root}/munge/munge.socket
MpiDefault=none
ProctrackType=proctrack/pgid
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SlurmdParameters=config_overrides
ReturnToService=2
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool/%n
SlurmctldPidFile={root}/slurmctld.pid
SlurmdPidFile={root}/slurmd-%n.pid
SlurmctldLogFile={root}/log/slurmctld.log
SlurmdLogFile={root}/log/slurmd-%n.log
SlurmctldTimeout=30
SlurmdTimeout=30
InactiveLimit=0
KillWait=5
MinJobAge=30
{nodes}
PartitionName=debug Nodes=node[01-02] Default=YES MaxTime=30 State=UP OverSubscribe=YES
"""


def _pid_files(root: Path) -> list[Path]:
    return [
        root / "munge" / "munged.pid",
        root / "slurmctld.pid",
        *(root / f"slurmd-{n}.pid" for n in NODES),
    ]


def up(root: Path) -> None:
    """Installs if needed, starts munged, slurmctld and two slurmd, waits until idle."""
    install()
    if not MUNGE_KEY.exists():
        raise NotStarted(f"{MUNGE_KEY} is missing (the munge package makes it)")
    for sub in ("state", "log", "munge", *(f"spool/{n}" for n in NODES)):
        (root / sub).mkdir(parents=True, exist_ok=True)
    root.chmod(0o755)  # munged runs as the munge user and must reach its socket directory
    munge = pwd.getpwnam("munge")
    os.chown(root / "munge", munge.pw_uid, munge.pw_gid)
    conf = root / "slurm.conf"
    conf.write_text(config(root, _free_ports(1 + len(NODES))))
    m = root / "munge"
    _start(
        [
            "runuser", "-u", "munge", "--", "munged", f"--socket={m}/munge.socket",
            f"--pid-file={m}/munged.pid", f"--log-file={m}/munged.log",
            f"--seed-file={m}/munged.seed", f"--key-file={MUNGE_KEY}",
        ],
        "munged",
    )  # fmt: skip
    _start(["slurmctld", "-f", str(conf), "-c"], "slurmctld")
    for node in NODES:
        _start(["slurmd", "-f", str(conf), "-N", node], f"slurmd {node}")
    env = {**os.environ, "SLURM_CONF": str(conf)}
    deadline = time.monotonic() + IDLE_WAIT_S
    states = ""
    while time.monotonic() < deadline:
        try:
            states = _run(["sinfo", "-h", "-N", "-o", "%N %T"], 10, env=env).stdout
        except subprocess.TimeoutExpired:
            states = "sinfo timed out"
        if all(f"{n} idle" in states for n in NODES):
            return
        time.sleep(0.5)
    raise NotStarted(f"nodes not idle within {IDLE_WAIT_S:g} s: {states.split()!r}")


def _start(args: list[str], what: str) -> None:
    try:
        done = _run(args, 30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise NotStarted(f"{what} did not start: {exc}") from None
    if done.returncode != 0:
        raise NotStarted(f"{what} did not start: {(done.stderr or done.stdout).strip()[-300:]}")


def down(root: Path) -> None:
    """Stops every daemon ``up`` started, by the PIDs in its pid files (bounded waits)."""
    for pid_file in _pid_files(root):
        try:
            pid = int(pid_file.read_text().split()[0])
        except (OSError, ValueError, IndexError):
            continue
        for sig, wait in ((signal.SIGTERM, 10.0), (signal.SIGKILL, 5.0)):
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                break
            deadline = time.monotonic() + wait
            while time.monotonic() < deadline and _alive(pid):
                time.sleep(0.1)
            if not _alive(pid):
                break


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is gone for our purposes
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] not in ("up", "down"):
        print("usage: python -m tests.support.slurm_cluster up|down DIR", file=sys.stderr)
        return 2
    root = Path(argv[1]).resolve()
    if argv[0] == "down":
        down(root)
        return 0
    try:
        up(root)
    except NotStarted as exc:
        print(f"slurm_cluster: Slurm cannot be started here: {exc}", file=sys.stderr)
        down(root)
        return 1
    print(f"export SLURM_CONF={root / 'slurm.conf'}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
