"""The ``tf.errors`` mirror: one public error vocabulary for every layer of mwms_mpi.

Hierarchy (as in TensorFlow)::

    Exception
     └── OpError(node_def, op, message, error_code, *args, rank=None)
          ├── CancelledError            CANCELLED            (1)
          ├── UnknownError              UNKNOWN              (2)
          ├── InvalidArgumentError      INVALID_ARGUMENT     (3)  layouts that disagree across ranks
          ├── DeadlineExceededError     DEADLINE_EXCEEDED    (4)  a collective outran its timeout
          ├── NotFoundError             NOT_FOUND            (5)
          ├── AlreadyExistsError        ALREADY_EXISTS       (6)
          ├── PermissionDeniedError     PERMISSION_DENIED    (7)
          ├── ResourceExhaustedError    RESOURCE_EXHAUSTED   (8)
          ├── FailedPreconditionError   FAILED_PRECONDITION  (9)
          ├── AbortedError              ABORTED              (10)
          ├── OutOfRangeError           OUT_OF_RANGE         (11)
          ├── UnimplementedError        UNIMPLEMENTED        (12)
          ├── InternalError             INTERNAL             (13) the MPI library failed
          ├── UnavailableError          UNAVAILABLE          (14) a communicator poisoned by timeout
          ├── DataLossError             DATA_LOSS            (15)
          └── UnauthenticatedError      UNAUTHENTICATED      (16)

Where TensorFlow raises a builtin (``ValueError``, ``RuntimeError``, ...), mwms_mpi raises that
builtin; these classes are for what TF reports as ``tf.errors.*``. ``op`` is the name of the
operation (a string here, since there is no graph), ``rank`` the MPI rank that raised.
"""

from __future__ import annotations

import warnings
from typing import Any

OK = 0
CANCELLED = 1
UNKNOWN = 2
INVALID_ARGUMENT = 3
DEADLINE_EXCEEDED = 4
NOT_FOUND = 5
ALREADY_EXISTS = 6
PERMISSION_DENIED = 7
RESOURCE_EXHAUSTED = 8
FAILED_PRECONDITION = 9
ABORTED = 10
OUT_OF_RANGE = 11
UNIMPLEMENTED = 12
INTERNAL = 13
UNAVAILABLE = 14
DATA_LOSS = 15
UNAUTHENTICATED = 16


class OpError(Exception):
    """The base of the errors an operation reports, as ``tf.errors.OpError``.

    Args:
      node_def: kept for TF's signature; ``None`` here (there is no graph).
      op: the name of the failed operation, e.g. ``"all_reduce"``, or ``None``.
      message: the text of the error.
      error_code: one of the module's integer codes (required, as in TF).
      *args: if not empty, its first item is a dict of details, TF's ``experimental_payloads``.
      rank: the MPI rank that raised it (an mwms_mpi addition), or ``None``.
    """

    def __init__(
        self,
        node_def: Any,
        op: Any,
        message: str,
        error_code: int,
        *args: Any,
        rank: int | None = None,
    ) -> None:
        # TF calls Exception.__init__() with no arguments (its args are ()); ours carry the
        # message, so repr() and logging show it.
        super().__init__(message)
        self._node_def = node_def
        self._op = op
        self._message = message
        self._error_code = error_code
        self._experimental_payloads: Any = args[0] if args else {}
        self.rank = rank

    def __reduce__(self) -> Any:
        # Keeps errors picklable, so they can be gathered across ranks for a report.
        return (
            _rebuild,
            (
                type(self),
                self._node_def,
                self._op,
                self._message,
                self._error_code,
                self._experimental_payloads,
                self.rank,
            ),
        )

    @property
    def message(self) -> str:
        """The error message that describes the error."""
        return self._message

    @property
    def op(self) -> Any:
        """The operation that failed, if known."""
        return self._op

    @property
    def node_def(self) -> Any:
        """Always ``None``: mwms_mpi has no graph."""
        return self._node_def

    @property
    def error_code(self) -> int:
        """The integer error code that describes the error."""
        return self._error_code

    @property
    def experimental_payloads(self) -> Any:
        """A dictionary describing the details of the error (TF's payloads; usually empty)."""
        return self._experimental_payloads

    def __str__(self) -> str:
        return self._message


def _rebuild(
    cls: type[OpError],
    node_def: Any,
    op: Any,
    message: str,
    code: int,
    payloads: Any,
    rank: int | None,
) -> OpError:
    if cls is OpError:
        return OpError(node_def, op, message, code, payloads, rank=rank)
    # Every subclass takes TF's (node_def, op, message, *args) and fixes its own code.
    rebuild: Any = cls
    error: OpError = rebuild(node_def, op, message, payloads, rank=rank)
    return error


class CancelledError(OpError):
    """An operation or step was cancelled."""

    def __init__(
        self, node_def: Any, op: Any, message: str, *args: Any, rank: int | None = None
    ) -> None:
        super().__init__(node_def, op, message, CANCELLED, *args, rank=rank)


class UnknownError(OpError):
    """An error of a kind not known here."""

    def __init__(
        self, node_def: Any, op: Any, message: str, *args: Any, rank: int | None = None
    ) -> None:
        super().__init__(node_def, op, message, UNKNOWN, *args, rank=rank)


class InvalidArgumentError(OpError):
    """An operation got an invalid argument, e.g. ranks passed layouts that disagree."""

    def __init__(
        self, node_def: Any, op: Any, message: str, *args: Any, rank: int | None = None
    ) -> None:
        super().__init__(node_def, op, message, INVALID_ARGUMENT, *args, rank=rank)


class DeadlineExceededError(OpError):
    """A deadline expired before the operation could complete (a collective's timeout)."""

    def __init__(
        self, node_def: Any, op: Any, message: str, *args: Any, rank: int | None = None
    ) -> None:
        super().__init__(node_def, op, message, DEADLINE_EXCEEDED, *args, rank=rank)


class NotFoundError(OpError):
    """A requested entity (a file, a checkpoint) was not found."""

    def __init__(
        self, node_def: Any, op: Any, message: str, *args: Any, rank: int | None = None
    ) -> None:
        super().__init__(node_def, op, message, NOT_FOUND, *args, rank=rank)


class AlreadyExistsError(OpError):
    """An entity that an operation tried to create already exists."""

    def __init__(
        self, node_def: Any, op: Any, message: str, *args: Any, rank: int | None = None
    ) -> None:
        super().__init__(node_def, op, message, ALREADY_EXISTS, *args, rank=rank)


class PermissionDeniedError(OpError):
    """The caller does not have permission to run an operation."""

    def __init__(
        self, node_def: Any, op: Any, message: str, *args: Any, rank: int | None = None
    ) -> None:
        super().__init__(node_def, op, message, PERMISSION_DENIED, *args, rank=rank)


class ResourceExhaustedError(OpError):
    """Some resource has been exhausted."""

    def __init__(
        self, node_def: Any, op: Any, message: str, *args: Any, rank: int | None = None
    ) -> None:
        super().__init__(node_def, op, message, RESOURCE_EXHAUSTED, *args, rank=rank)


class FailedPreconditionError(OpError):
    """The system is not in a state to run an operation."""

    def __init__(
        self, node_def: Any, op: Any, message: str, *args: Any, rank: int | None = None
    ) -> None:
        super().__init__(node_def, op, message, FAILED_PRECONDITION, *args, rank=rank)


class AbortedError(OpError):
    """An operation was aborted, typically by a concurrent action."""

    def __init__(
        self, node_def: Any, op: Any, message: str, *args: Any, rank: int | None = None
    ) -> None:
        super().__init__(node_def, op, message, ABORTED, *args, rank=rank)


class OutOfRangeError(OpError):
    """An operation iterated past the valid range, e.g. the end of a dataset."""

    def __init__(
        self, node_def: Any, op: Any, message: str, *args: Any, rank: int | None = None
    ) -> None:
        super().__init__(node_def, op, message, OUT_OF_RANGE, *args, rank=rank)


class UnimplementedError(OpError):
    """An operation has not been implemented."""

    def __init__(
        self, node_def: Any, op: Any, message: str, *args: Any, rank: int | None = None
    ) -> None:
        super().__init__(node_def, op, message, UNIMPLEMENTED, *args, rank=rank)


class InternalError(OpError):
    """The runtime (here: the MPI library) broke an invariant or reported an error."""

    def __init__(
        self, node_def: Any, op: Any, message: str, *args: Any, rank: int | None = None
    ) -> None:
        super().__init__(node_def, op, message, INTERNAL, *args, rank=rank)


class UnavailableError(OpError):
    """The runtime is unavailable, e.g. a communicator poisoned by an earlier timeout.

    ``failed_ranks`` (an mwms_mpi addition, set after construction so that the constructor
    stays TF's): the ``COMM_WORLD`` ranks MPI reported failed when the error is a peer's
    process failure seen through ULFM (``collective/ulfm.py``), the communicator then revoked
    on every survivor; empty otherwise.
    """

    failed_ranks: tuple[int, ...] = ()

    def __init__(
        self, node_def: Any, op: Any, message: str, *args: Any, rank: int | None = None
    ) -> None:
        super().__init__(node_def, op, message, UNAVAILABLE, *args, rank=rank)


class DataLossError(OpError):
    """Unrecoverable data loss or corruption."""

    def __init__(
        self, node_def: Any, op: Any, message: str, *args: Any, rank: int | None = None
    ) -> None:
        super().__init__(node_def, op, message, DATA_LOSS, *args, rank=rank)


class UnauthenticatedError(OpError):
    """The request does not have valid authentication credentials."""

    def __init__(
        self, node_def: Any, op: Any, message: str, *args: Any, rank: int | None = None
    ) -> None:
        super().__init__(node_def, op, message, UNAUTHENTICATED, *args, rank=rank)


_CODE_TO_CLASS: dict[int, type[OpError]] = {
    CANCELLED: CancelledError,
    UNKNOWN: UnknownError,
    INVALID_ARGUMENT: InvalidArgumentError,
    DEADLINE_EXCEEDED: DeadlineExceededError,
    NOT_FOUND: NotFoundError,
    ALREADY_EXISTS: AlreadyExistsError,
    PERMISSION_DENIED: PermissionDeniedError,
    RESOURCE_EXHAUSTED: ResourceExhaustedError,
    FAILED_PRECONDITION: FailedPreconditionError,
    ABORTED: AbortedError,
    OUT_OF_RANGE: OutOfRangeError,
    UNIMPLEMENTED: UnimplementedError,
    INTERNAL: InternalError,
    UNAVAILABLE: UnavailableError,
    DATA_LOSS: DataLossError,
    UNAUTHENTICATED: UnauthenticatedError,
}


def exception_type_from_error_code(error_code: int) -> type[OpError]:
    """Returns the ``OpError`` subclass for ``error_code``, as TF's function of that name.

    Raises:
      KeyError: for a code with no class (``OK`` included), as in TF.
    """
    return _CODE_TO_CLASS[error_code]


def error_code_from_exception_type(cls: type) -> Any:
    """Returns the integer code of an ``OpError`` subclass, as TF's function of that name.

    For any other class TF warns "Unknown class exception" and returns (not raises) an
    ``UnknownError`` instance; so does this function.
    """
    for code, klass in _CODE_TO_CLASS.items():
        if klass is cls:
            return code
    warnings.warn("Unknown class exception", stacklevel=2)
    return UnknownError(None, None, "Unknown class exception", None)
