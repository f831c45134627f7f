"""mwms_mpi.errors against tf.errors: names, codes, hierarchy, constructor, pickling, lookups."""

from __future__ import annotations

import inspect
import pickle

import pytest

from mwms_mpi import errors

# Recorded from TensorFlow 2.21.0:
#   /tmp/tfvenv/bin/python -c 'import tensorflow as tf
#   for n in TF_CODES: print(n, getattr(tf.errors, n))
#   for n in TF_CLASSES: print(n, [c.__name__ for c in getattr(tf.errors, n).__mro__])'
# and the lookups from tf.compat.v1.errors (TF 2 exports them only there).
TF_CODES = {
    "OK": 0,
    "CANCELLED": 1,
    "UNKNOWN": 2,
    "INVALID_ARGUMENT": 3,
    "DEADLINE_EXCEEDED": 4,
    "NOT_FOUND": 5,
    "ALREADY_EXISTS": 6,
    "PERMISSION_DENIED": 7,
    "RESOURCE_EXHAUSTED": 8,
    "FAILED_PRECONDITION": 9,
    "ABORTED": 10,
    "OUT_OF_RANGE": 11,
    "UNIMPLEMENTED": 12,
    "INTERNAL": 13,
    "UNAVAILABLE": 14,
    "DATA_LOSS": 15,
    "UNAUTHENTICATED": 16,
}
TF_CLASSES = {
    "CancelledError": "CANCELLED",
    "UnknownError": "UNKNOWN",
    "InvalidArgumentError": "INVALID_ARGUMENT",
    "DeadlineExceededError": "DEADLINE_EXCEEDED",
    "NotFoundError": "NOT_FOUND",
    "AlreadyExistsError": "ALREADY_EXISTS",
    "PermissionDeniedError": "PERMISSION_DENIED",
    "ResourceExhaustedError": "RESOURCE_EXHAUSTED",
    "FailedPreconditionError": "FAILED_PRECONDITION",
    "AbortedError": "ABORTED",
    "OutOfRangeError": "OUT_OF_RANGE",
    "UnimplementedError": "UNIMPLEMENTED",
    "InternalError": "INTERNAL",
    "UnavailableError": "UNAVAILABLE",
    "DataLossError": "DATA_LOSS",
    "UnauthenticatedError": "UNAUTHENTICATED",
}


@pytest.mark.parametrize(("name", "code"), sorted(TF_CODES.items()))
def test_codes_equal_tf(name: str, code: int) -> None:
    assert getattr(errors, name) == code


@pytest.mark.parametrize(("name", "code_name"), sorted(TF_CLASSES.items()))
def test_hierarchy_and_codes(name: str, code_name: str) -> None:
    cls = getattr(errors, name)
    # TF: [name, 'OpError', 'Exception', 'BaseException', 'object'].
    assert [c.__name__ for c in cls.__mro__] == [
        name,
        "OpError",
        "Exception",
        "BaseException",
        "object",
    ]
    error = cls(None, "all_reduce", "went wrong")
    assert error.error_code == TF_CODES[code_name]
    assert errors.exception_type_from_error_code(TF_CODES[code_name]) is cls
    assert errors.error_code_from_exception_type(cls) == TF_CODES[code_name]


def test_constructor_signatures_match_tf() -> None:
    # TF: OpError(self, node_def, op, message, error_code, *args);
    #     InternalError(self, node_def, op, message, *args). rank is our keyword-only addition.
    base = list(inspect.signature(errors.OpError.__init__).parameters)
    assert base == ["self", "node_def", "op", "message", "error_code", "args", "rank"]
    for name in TF_CLASSES:
        params = list(inspect.signature(getattr(errors, name).__init__).parameters)
        assert params == ["self", "node_def", "op", "message", "args", "rank"], name


def test_op_error_requires_error_code() -> None:
    # TF: TypeError: OpError.__init__() missing 1 required positional argument: 'error_code'
    with pytest.raises(TypeError, match="error_code"):
        errors.OpError(None, None, "m")  # type: ignore[call-arg]


def test_attributes() -> None:
    error = errors.DeadlineExceededError(None, "all_reduce", "took too long", rank=3)
    assert str(error) == "took too long"
    assert error.message == "took too long"
    assert error.op == "all_reduce"
    assert error.node_def is None
    assert error.error_code == errors.DEADLINE_EXCEEDED
    assert error.rank == 3
    assert error.experimental_payloads == {}
    assert errors.InternalError(None, None, "x").rank is None


def test_payloads_are_the_first_extra_argument() -> None:
    # TF: InternalError(None, None, "x", {"a": b"b"}).experimental_payloads == {"a": b"b"}
    error = errors.InternalError(None, None, "x", {"a": b"b"})
    assert error.experimental_payloads == {"a": b"b"}


def test_raise_and_catch_as_op_error() -> None:
    with pytest.raises(errors.OpError) as info:
        raise errors.UnavailableError(None, "barrier", "communicator poisoned", rank=1)
    assert isinstance(info.value, errors.UnavailableError)
    assert info.value.error_code == 14


@pytest.mark.parametrize("name", ["OpError", *sorted(TF_CLASSES)])
def test_pickle_round_trip(name: str) -> None:
    cls = getattr(errors, name)
    if cls is errors.OpError:
        error = errors.OpError(None, "gather", "message", errors.NOT_FOUND, rank=2)
    else:
        error = cls(None, "gather", "message", rank=2)
    back = pickle.loads(pickle.dumps(error))
    assert type(back) is cls
    assert (back.node_def, back.op, back.message, back.error_code, back.rank) == (
        None,
        "gather",
        "message",
        error.error_code,
        2,
    )
    assert str(back) == "message"


def test_pickle_keeps_payloads() -> None:
    back = pickle.loads(pickle.dumps(errors.AbortedError(None, None, "m", {"k": b"v"})))
    assert back.experimental_payloads == {"k": b"v"}


@pytest.mark.parametrize("code", [0, 17, 99])
def test_exception_type_from_unknown_code(code: int) -> None:
    # TF: KeyError for OK (0) and for codes past UNAUTHENTICATED.
    with pytest.raises(KeyError):
        errors.exception_type_from_error_code(code)


@pytest.mark.parametrize("cls", [ValueError, errors.OpError])
def test_error_code_from_unknown_class(cls: type) -> None:
    # TF warns "Unknown class exception" and *returns* UnknownError(None, None,
    # "Unknown class exception", None) (payloads None), for OpError itself too.
    with pytest.warns(UserWarning, match="Unknown class exception"):
        result = errors.error_code_from_exception_type(cls)
    assert type(result) is errors.UnknownError
    assert result.message == "Unknown class exception"
    assert result.experimental_payloads is None
