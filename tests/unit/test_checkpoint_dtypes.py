"""A restore never casts; what ``save`` accepts restores bit for bit; SyncOnRead follows TF.

Issue 23, items 5 and 6: an int64 ``2**40 + 5`` restored into an int32 variable became 5 and
``1e10`` into float16 became ``inf`` (``assert_consumed()`` passed); str, bytes and structured
arrays saved without error and then raised ``DataLossError`` on every restore.

TF 2.21 (``tensorflow-cpu==2.21.0``) with the same programs, run outside this repository:

* ``dtype_refusal.py``: ``tf.train.Checkpoint(v=tf.Variable(saved)).write(...)`` then ``.read``
  into a ``tf.Variable`` of another dtype: every case raises ``InvalidArgumentError`` from
  ``RestoreV2`` ("expected dtype X does not equal original dtype Y"), widening included, and the
  variable keeps its value;
* ``sync_on_read.py``: a ``MirroredStrategy`` over two logical CPUs; a checkpoint holding
  ``saved`` read into ``ON_READ`` variables of each aggregation: each replica's component (its
  bytes) and the aggregated read, recorded in ``TF_SYNC_ON_READ``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

import mwms_mpi
import mwms_mpi.distribute
from mwms_mpi import errors, train

# dtype_refusal.py: (saved, target dtype, TF's message after "tensor_name = v/...VALUE; ")
TF_REFUSALS = [
    (np.int64(2**40 + 5), np.int32, "expected dtype int32 does not equal original dtype int64"),
    (np.float32(1e10), np.float16, "expected dtype half does not equal original dtype float"),
    (np.float64(0.1), np.float32, "expected dtype float does not equal original dtype double"),
    (np.int32(5), np.int64, "expected dtype int64 does not equal original dtype int32"),
    (np.float32(0.5), np.float64, "expected dtype double does not equal original dtype float"),
]


@pytest.mark.parametrize(("saved", "target", "tf_message"), TF_REFUSALS)
@pytest.mark.parametrize("kind", ["variable", "array"])
def test_a_dtype_other_than_the_saved_one_raises_tfs_error(
    tmp_path: Path, saved: Any, target: Any, tf_message: str, kind: str
) -> None:
    path = train.Checkpoint(v=mwms_mpi.Variable(saved)).write(str(tmp_path / "c"))
    other = np.ones(2)  # a value that fits: nothing at all is restored when one does not
    obj: Any = mwms_mpi.Variable(target(0)) if kind == "variable" else np.zeros((), target)
    with pytest.raises(errors.InvalidArgumentError, match=f"tensor_name = v; {tf_message}"):
        train.Checkpoint(v=obj, w=other).read(path)
    assert np.asarray(obj.numpy() if kind == "variable" else obj) == 0
    assert other.tolist() == [1.0, 1.0]


@pytest.mark.parametrize(
    "value",
    [
        np.array(["a", "bc"]),
        np.array([b"a", b"bc"]),
        np.zeros(2, dtype=[("x", "<i4"), ("y", "<f8")]),
        np.zeros(2, dtype="V8"),
    ],
    ids=["str", "bytes", "structured", "void"],
)
@pytest.mark.parametrize("holder", ["array", "variable"])
def test_a_dtype_that_would_not_restore_is_refused_before_writing(
    tmp_path: Path, value: np.ndarray, holder: str
) -> None:
    obj: Any = value if holder == "array" else _Duck(value)
    directory = tmp_path / "new"
    ckpt = train.Checkpoint(ok=np.ones(2), bad={"x": obj})
    with pytest.raises(ValueError, match=r"Cannot checkpoint bad/x: its dtype .* Nothing"):
        ckpt.save(str(directory / "ckpt"))
    with pytest.raises(ValueError, match="cannot be restored bit for bit"):
        train.CheckpointManager(ckpt, str(directory), max_to_keep=1).save()
    assert not directory.exists()  # nothing written, not even the directory


class _Duck:
    """A variable of the protocol only, whose value has a dtype attribute-less holders hide."""

    def __init__(self, value: np.ndarray) -> None:
        self.value = value

    def numpy(self) -> np.ndarray:
        return self.value

    def assign(self, value: Any) -> None:
        self.value = value


DTYPES = [
    "bool",
    "int8",
    "int16",
    "int32",
    "int64",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
    "float16",
    "float32",
    "float64",
    "longdouble",
    "complex64",
    "complex128",
    "clongdouble",
    "datetime64[ns]",
    "timedelta64[us]",
]


# x87 extended precision: 10 bytes of value and 6 of padding that no operation keeps
_EXTENDED = ("float128", "complex256")
_EXTENDED_BYTES = 10 if np.finfo(np.longdouble).nmant == 63 else 16


def _random_bits(dtype: np.dtype, n: int, seed: int) -> np.ndarray:
    """``n`` values of ``dtype`` made of random bytes: NaN payloads, subnormals, -0.0, NaT."""
    rng = np.random.default_rng(seed)
    if dtype.kind == "b":
        return rng.integers(0, 2, n).astype(bool)
    if dtype.name in _EXTENDED:
        values = (rng.standard_normal((n, 2)) * 1e300).astype(np.longdouble)
        values = values[:, 0] if dtype.kind == "f" else values[:, 0] + 1j * values[:, 1]
        values = values.astype(dtype)
    else:
        raw = rng.integers(0, 256, n * dtype.itemsize, dtype=np.uint8).tobytes()
        values = np.frombuffer(raw, dtype=dtype).copy()
    if dtype.kind == "f":
        values[:3] = np.array([-0.0, np.inf, np.nan]).astype(dtype)
    return values


def _bits(values: np.ndarray) -> bytes:
    if values.dtype.name in _EXTENDED:
        flat = np.ascontiguousarray(values).reshape(-1).view(np.longdouble)
        return b"".join(x.tobytes()[:_EXTENDED_BYTES] for x in flat)
    return values.tobytes()


@pytest.mark.parametrize("name", DTYPES)
@pytest.mark.parametrize("kind", ["array", "variable", "mirrored"])
def test_every_savable_dtype_restores_bit_for_bit(tmp_path: Path, name: str, kind: str) -> None:
    dtype = np.dtype(name)
    saved = _random_bits(dtype, 16, seed=len(name))
    strategy = mwms_mpi.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])

    def make(value: np.ndarray) -> Any:
        if kind == "array":
            return value.copy()
        if kind == "variable":
            return mwms_mpi.Variable(value.copy())
        with strategy.scope():
            return mwms_mpi.Variable(value.copy())

    path = train.Checkpoint(v=make(saved)).write(str(tmp_path / "c"))
    target = make(np.zeros_like(saved))
    train.Checkpoint(v=target).read(path).assert_consumed()
    copies = [target] if kind == "array" else getattr(target, "values", [target])
    for copy in copies:
        got = np.asarray(copy if kind == "array" else copy.numpy())
        assert got.dtype == dtype and _bits(got) == _bits(saved), (name, got, saved)


# sync_on_read.py: (dtype, saved, aggregation) -> (the bytes of each replica's component, read)
TF_SYNC_ON_READ = {
    ("int32", 7, "SUM"): (["03000000", "03000000"], 6),
    ("int32", 7, "ONLY_FIRST_REPLICA"): (["07000000", "07000000"], 7),
    ("int32", -7, "SUM"): (["fdffffff", "fdffffff"], -6),
    ("int64", 2**53 + 1, "SUM"): (["0000000000001000", "0000000000001000"], 9007199254740992),
    ("int64", 2**53 + 1, "ONLY_FIRST_REPLICA"): (
        ["0100000000002000", "0100000000002000"],
        9007199254740993,
    ),
    ("float16", 1.0e-7, "SUM"): (["0100", "0100"], 1.1920928955078125e-07),
    ("float16", 1.0e-7, "MEAN"): (["0200", "0200"], 1.1920928955078125e-07),
    ("float32", 1.0, "SUM"): (["0000003f", "0000003f"], 1.0),
    ("float32", 1.0, "MEAN"): (["0000803f", "0000803f"], 1.0),
    ("float64", 0.1, "SUM"): (["9a9999999999a93f", "9a9999999999a93f"], 0.1),
    ("float64", 0.1, "MEAN"): (["9a9999999999b93f", "9a9999999999b93f"], 0.1),
    ("uint8", 255, "SUM"): (["7f", "7f"], 254),
    ("uint8", 255, "ONLY_FIRST_REPLICA"): (["ff", "ff"], 255),
    ("int8", -127, "SUM"): (["c1", "c1"], -126),
}


@pytest.mark.parametrize(("case", "tf_result"), list(TF_SYNC_ON_READ.items()), ids=str)
def test_sync_on_read_variables_restore_by_tfs_rule(
    tmp_path: Path, case: tuple[str, Any, str], tf_result: tuple[list[str], Any]
) -> None:
    name, saved, aggregation = case
    dtype = np.dtype(name)
    path = train.Checkpoint(v=mwms_mpi.Variable(np.array(saved, dtype))).write(str(tmp_path / "c"))
    strategy = mwms_mpi.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    with strategy.scope():
        var = mwms_mpi.Variable(
            np.array(0, dtype),
            synchronization=mwms_mpi.VariableSynchronization.ON_READ,
            aggregation=getattr(mwms_mpi.VariableAggregation, aggregation),
        )
    train.Checkpoint(v=var).read(path).assert_consumed()
    components, read = tf_result
    assert [np.asarray(c.numpy()).tobytes().hex() for c in var.values] == components
    assert np.asarray(var.numpy()).item() == read


def test_sync_on_read_restore_inside_a_replica_sets_every_component(tmp_path: Path) -> None:
    """TF's restore ops assign every component whatever the context (a lazily built variable
    may be created, and restored, inside ``strategy.run``)."""
    path = train.Checkpoint(v=mwms_mpi.Variable(np.float32(8.0))).write(str(tmp_path / "c"))
    strategy = mwms_mpi.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    with strategy.scope():
        var = mwms_mpi.Variable(
            np.float32(0.0),
            synchronization=mwms_mpi.VariableSynchronization.ON_READ,
            aggregation=mwms_mpi.VariableAggregation.SUM,
        )
    ckpt = train.Checkpoint(v=var)
    strategy.run(lambda: ckpt.read(path) if _first_replica() else None)
    assert [float(c.numpy()) for c in var.values] == [4.0, 4.0]


def _first_replica() -> bool:
    context = mwms_mpi.distribute.get_replica_context()
    return context is not None and int(context.replica_id_in_sync_group) == 0
