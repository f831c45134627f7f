"""Checkpoint behaviours a differential run against TF 2.21 found to differ; TF's outputs pinned.

Each expected value below was printed by TF 2.21 (``tf.train.Checkpoint``, ``tf.Variable``,
``tf.Module``) running the same program.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import mwms_mpi
from mwms_mpi import errors, train


def _saved(tmp_path: Path) -> str:
    return train.Checkpoint(
        a=mwms_mpi.Variable(np.zeros(2, np.float32)), b=mwms_mpi.Variable(np.zeros(2, np.float32))
    ).save(str(tmp_path / "ck"))


# -- one restore, several values that do not fit ------------------------------------------------


def test_a_dtype_mismatch_is_reported_before_a_shape_mismatch(tmp_path: Path) -> None:
    # TF's RestoreV2 reads (and checks the dtypes of) every value before any is assigned, and
    # the shapes are checked when assigning: "a" of another shape and "b" of another dtype
    # raise InvalidArgumentError about "b", whichever comes first.
    path = _saved(tmp_path)
    ckpt = train.Checkpoint(
        a=mwms_mpi.Variable(np.zeros(3, np.float32)), b=mwms_mpi.Variable(np.zeros(2, np.float64))
    )
    with pytest.raises(errors.InvalidArgumentError, match="tensor_name = b; expected dtype double"):
        ckpt.restore(path)


def test_a_shape_mismatch_names_the_variable_as_tf_does(tmp_path: Path) -> None:
    # TF: "... with shape (3,) and name a:0." (the variable's name, not its checkpoint key)
    path = _saved(tmp_path)
    ckpt = train.Checkpoint(a=mwms_mpi.Variable(np.zeros(3, np.float32), name="a"))
    with pytest.raises(
        ValueError,
        match=r"^Received incompatible tensor with shape \(2,\) when attempting to restore "
        r"variable with shape \(3,\) and name a:0\.$",
    ):
        ckpt.restore(path)
