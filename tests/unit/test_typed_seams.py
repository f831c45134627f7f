"""The typed seams between distribute/, values/ and train/ (docs/architecture.md, "Layers").

The layers below the strategy see it through ``_context.StrategyLike``/``ExtendedLike``/
``CommunicatorLike`` (mypy checks the concrete classes against them); these tests pin what the
type checker cannot: that every strategy's ``extended`` has the public ``communicator``, that a
variable is recognised by its type and not by a marker attribute, and that no private name is
looked up by ``getattr`` across the seam.
"""

from __future__ import annotations

import ast
import pathlib

import numpy as np
import pytest

import mwms_mpi
import mwms_mpi.distribute as ds
from mwms_mpi import _context
from mwms_mpi.values._base import VariableBase
from mwms_mpi.values.convert import as_array, convert_to_dtype, is_tensor

PACKAGE = pathlib.Path(mwms_mpi.__file__).parent
SEAM = ("values", "train", "optimizers", "metrics", "distribute", "cli", "_context.py")
# Names that used to be reached by getattr across the seam (or marker flags tested in place of
# a type); each has a typed access now.
UNTYPED = frozenset(
    {
        "_communicator",
        "communicator",
        "_create_variable",
        "_is_mwms_variable",
        "_is_distributed_variable",
        "_is_mirrored",
        "_distribute_strategy",
    }
)


def test_every_strategys_extended_has_the_public_communicator() -> None:
    """One worker, or the default strategy: ``None`` (values/ and train/ read it unguarded)."""
    assert ds.MirroredStrategy(["/cpu:0", "/cpu:1"]).extended.communicator is None
    default = _context.get_default().strategy
    assert default is not None and default.extended.communicator is None


def test_every_variable_class_is_a_variable_base() -> None:
    plain = mwms_mpi.Variable(1.0)
    unread = plain.assign(2.0)
    strategy = ds.MirroredStrategy(["/cpu:0", "/cpu:1"])
    with strategy.scope():
        mirrored = mwms_mpi.Variable(1.0)
        on_read = mwms_mpi.Variable(1.0, synchronization=mwms_mpi.VariableSynchronization.ON_READ)
    names = [type(v).__name__ for v in (plain, unread, mirrored, on_read)]
    assert names == ["Variable", "UnreadVariable", "MirroredVariable", "SyncOnReadVariable"]
    assert all(isinstance(v, VariableBase) and is_tensor(v) for v in (plain, unread, mirrored))


class _Impostor:
    """Not a variable, though it carries the marker attribute the values layer used to test."""

    _is_mwms_variable = True

    def read_value(self) -> np.ndarray:
        return np.ones(2, np.float32)


def test_an_object_with_the_old_marker_attribute_is_not_a_variable() -> None:
    impostor = _Impostor()
    assert not is_tensor(impostor)
    with pytest.raises(ValueError, match="unsupported type"):
        as_array(impostor)
    with pytest.raises(ValueError, match="unsupported type"):
        convert_to_dtype(impostor, np.float32)


def _untyped_getattrs(path: pathlib.Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("getattr", "hasattr")
            and len(node.args) >= 2
            and isinstance(node.args[1], ast.Constant)
            and node.args[1].value in UNTYPED
        ):
            found.append(f"{path.relative_to(PACKAGE)}:{node.lineno}: {node.args[1].value}")
    return found


def test_no_getattr_of_the_seams_names() -> None:
    files = sorted(
        p
        for name in SEAM
        for p in ((PACKAGE / name).rglob("*.py") if "." not in name else [PACKAGE / name])
    )
    assert len(files) > 20
    assert [hit for path in files for hit in _untyped_getattrs(path)] == []
