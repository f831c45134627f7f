"""The seam between the communicator and the libraries that move bytes (MPI, NCCL, staging).

A backend says which arrays it ``supports`` and performs the collective on contiguous buffers
it is handed; the communicator owns everything else (layouts, packing, deadlines, errors).
Backends are kept in an ordered list and the first that supports an array wins, so adding one
is a new file and a list entry, with no ``if device == ...`` chains in callers.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from mwms_mpi.collective.deadline import Completion
from mwms_mpi.collective.ops import Op


class CollectiveBackend(Protocol):
    """One way to run collectives on one kind of array.

    Each operation either completes before returning (``blocking=True``, returns ``None``) or
    returns a :class:`Completion` the communicator polls against its deadline (one with an
    ``abort()`` method has it called when the deadline passes). ``send=None`` means in place:
    the result overwrites ``recv``. A device backend may return before the device has finished
    (NCCL queues on the caller's stream): later work on that stream sees the result.
    """

    name: str
    xp: Any  # the array module: numpy, cupy
    errors: tuple[type[Exception], ...]
    """The library's own exceptions beside MPI's (NCCL's ``NcclError``): the communicator
    translates them as it does MPI's (``InternalError``, the communicator poisoned)."""
    device: int | None
    """The one CUDA device whose arrays this backend moves, and which must be current (NCCL:
    its communicator's), checked in each call's plan step; ``None``: any (MPI takes any
    pointer, staging copies on the array's own device)."""

    def supports(self, array: object) -> bool:
        """Whether this backend can run collectives on ``array``."""
        ...

    def is_sendable(self, array: Any) -> bool:
        """Whether ``array`` can be handed to the library as it is (contiguous, native order)."""
        ...

    def empty(self, shape: tuple[int, ...], dtype: Any) -> Any:
        """A new uninitialised array."""
        ...

    def all_reduce(
        self, comm: Any, send: Any | None, recv: Any, op: Op, blocking: bool
    ) -> Completion | None:
        """Element-wise reduction of ``send`` (or ``recv`` in place) over ``comm``'s ranks."""
        ...

    def all_gatherv(
        self, comm: Any, send: Any, recv: Any, counts: Sequence[int], blocking: bool
    ) -> Completion | None:
        """Concatenates every rank's ``send`` (``counts[r]`` elements from rank r) into ``recv``."""
        ...

    def broadcast(self, comm: Any, buf: Any, root: int, blocking: bool) -> Completion | None:
        """Overwrites ``buf`` on every rank with its content on ``root``."""
        ...

    def close(self) -> None:
        """Releases what the backend holds (an NCCL communicator, pinned buffers)."""
        ...


def select(backends: Sequence[CollectiveBackend], array: object) -> CollectiveBackend:
    """The first backend in ``backends`` that supports ``array``.

    Raises:
      TypeError: when none does, naming the array's type and the backends tried.
    """
    for backend in backends:
        if backend.supports(array):
            return backend
    names = ", ".join(b.name for b in backends)
    raise TypeError(
        f"no collective backend supports an argument of type {type(array).__name__} "
        f"(tried: {names}); pass a numpy array (or a CuPy array with the [gpu] extra)"
    )
