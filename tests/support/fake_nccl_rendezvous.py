"""How the NCCL double's ranks find each other: through the unique id's maker, over MPI.

Real NCCL meets at a socket named in the unique id. The double's id names its maker's world rank
instead: every other rank sends the maker its NCCL rank and world rank on ``COMM_WORLD`` (a tag
of its own), the maker answers with the member list (or the same error for all), and the
members make an MPI communicator of their own with ``Create_group``, on which the double then
exchanges its calls' data. Waits are bounded, so ranks that never meet raise instead of hanging.
"""

from __future__ import annotations

import time
from typing import Any

from tests.support.fake_nccl_calls import INVALID_USAGE, NcclError

_TAG = 0x6E43  # the rendezvous messages' tag on COMM_WORLD (below MPI's guaranteed 32767)
_stash: dict[tuple[int, int], list[tuple[Any, ...]]] = {}


def world() -> Any:
    """``MPI.COMM_WORLD`` (imported when first needed)."""
    from mpi4py import MPI

    return MPI.COMM_WORLD


RENDEZVOUS_S = 30.0  # how long a rank waits for the others to join (then every one raises)


def _receive(world: Any, source: int, tag: int, what: str) -> Any:
    """A message from ``source``, polled until :data:`RENDEZVOUS_S` has passed."""
    deadline = time.monotonic() + RENDEZVOUS_S
    while not world.iprobe(source=source, tag=tag):
        if time.monotonic() > deadline:
            raise NcclError(
                INVALID_USAGE,
                f"NcclCommunicator: {what} within {RENDEZVOUS_S:.0f} s (did every rank join "
                "with the same unique id, made by one of them?)",
            )
        time.sleep(0.001)
    return world.recv(source=source, tag=tag)


def rendezvous(maker: int, serial: int, nranks: int, rank: int) -> list[int]:
    """The world ranks of the communicator's ranks, in NCCL rank order (through the id's maker,
    on COMM_WORLD). Every member raises alike if their ranks or sizes disagree."""
    comm = world()
    me = comm.Get_rank()
    key = (maker, serial)
    if me != maker:
        comm.send((key, rank, me, nranks), dest=maker, tag=_TAG)
        what, value = _receive(comm, maker, _TAG + 1, f"world rank {maker} did not answer")
        if what != "ok":
            raise NcclError(INVALID_USAGE, value)
        return list(value)
    joined = [(rank, me, nranks)]
    for _ in range(nranks - 1):
        pending = _stash.get(key)
        if pending:
            message = pending.pop(0)
        else:
            while True:
                message = _receive(comm, _any_source(), _TAG, f"only {len(joined)} joined")
                if message[0] == key:
                    break
                _stash.setdefault(message[0], []).append(message)
        joined.append(tuple(message[1:]))
    ranks = sorted(r for r, _, _ in joined)
    sizes = {n for _, _, n in joined}
    members = [w for _, w, _ in sorted(joined)]
    if ranks != list(range(nranks)) or sizes != {nranks}:
        listing = ", ".join(f"world rank {w}: rank {r} of {n}" for r, w, n in sorted(joined))
        reply: tuple[str, Any] = ("error", f"NcclCommunicator: ranks and sizes differ ({listing})")
    else:
        reply = ("ok", members)
    for w in sorted({w for _, w, _ in joined}):
        if w != me:
            comm.send(reply, dest=w, tag=_TAG + 1)
    if reply[0] != "ok":
        raise NcclError(INVALID_USAGE, reply[1])
    return members


def _any_source() -> int:
    from mpi4py import MPI

    return int(MPI.ANY_SOURCE)
