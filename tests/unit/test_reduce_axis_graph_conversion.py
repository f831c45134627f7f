"""``Strategy.reduce("SUM", value, axis)`` converts a Python value as TF's ``tf.function`` does.

TF 2.21 runs the SUM step in a ``tf.function`` (one per axis): numpy scalars in the argument
become tensors, Python lists graph constants (``make_tensor_proto``: numpy's conversion), and a
list holding tensors is packed without the eager fast path (``mwms_mpi/_graph_constant.py``).
TF's errors there start with its tracing frame (``in user code: ...``); the pins are the
error's class and its last line, which is the message here.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pytest

from mwms_mpi import distribute as ds

F32 = np.array(1.0, np.float32)
I64 = np.array(2, np.int64)
I32 = np.array(1, np.int32)

CASES: dict[str, Any] = {
    "[True,0]": [True, 0],
    "[1,2.5]": [1, 2.5],
    "[1e300]": [1e300],
    "[2**40,1]": [2**40, 1],
    "[np.int64(2),1]": [np.int64(2), 1],
    "[np.float64(2.5),f32]": [np.float64(2.5), F32],
    "[i32,i64]": [I32, I64],
    "[i64,1.5]": [I64, 1.5],
    "[[False],[0]]": [[False], [0]],
    "[np.array(1.5),2]": [np.array(1.5), 2],
    "[f32,True]": [F32, True],
    "[np.bool_(True),1]": [np.bool_(True), 1],
    "[1j,1]": [1j, 1],
    "[2**63]": [2**63],
    "[np.float16(1),1e5]": [np.float16(1), 1e5],
    "[[1],[2,3]]": [[1], [2, 3]],
    "[None]": [None],
    "[i32,'a']": [I32, "a"],
    "[i32,2**40]": [I32, 2**40],
}

# TF 2.21: tf.distribute.get_strategy().reduce("SUM", CASES[name], axis=0) (tensors for arrays)
DEFAULT = [
    ("[True,0]", "int32 1"),
    ("[1,2.5]", "float32 3.5"),
    ("[1e300]", "float32 inf"),
    ("[2**40,1]", "int64 1099511627777"),
    ("[np.int64(2),1]", "int64 3"),
    (
        "[np.float64(2.5),f32]",
        "ERR TypeError: Cannot convert a list containing a tensor of dtype <dtype: 'float32'> "
        "to <dtype: 'float64'>",
    ),
    (
        "[i32,i64]",
        "ERR TypeError: Cannot convert a list containing a tensor of dtype <dtype: 'int64'> to "
        "<dtype: 'int32'>",
    ),
    ("[i64,1.5]", "ERR TypeError: Expected int64, but got 1.5 of type 'float'."),
    ("[[False],[0]]", "int32 [0]"),
    ("[np.array(1.5),2]", "float64 3.5"),
    ("[f32,True]", "float32 2.0"),
    ("[np.bool_(True),1]", "ERR TypeError: Expected bool, but got 1 of type 'int'."),
    ("[1j,1]", "complex128 (1+1j)"),
    ("[2**63]", "uint64 9223372036854775808"),
    ("[np.float16(1),1e5]", "float16 inf"),
    (
        "[[1],[2,3]]",
        "ERR ValueError: Tried to convert 'input' to a tensor and failed. Error: setting an "
        "array element with a sequence. The requested array has an inhomogeneous shape after 1 "
        "dimensions. The detected shape was (2,) + inhomogeneous part.",
    ),
    (
        "[None]",
        "ERR TypeError: Failed to convert elements of [None] to Tensor. Consider casting "
        "elements to a supported type. See https://www.tensorflow.org/api_docs/python/tf/dtypes"
        " for supported TF dtypes.",
    ),
    ("[i32,'a']", "ERR TypeError: Expected int32, but got a of type 'str'."),
    ("[i32,2**40]", "int32 1"),  # 2**40 wraps to 0 in int32 (TF's numpy_compat.np_array)
]


def _show(fn: Any) -> str:
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # TF warns of nothing here
        try:
            result = np.asarray(fn())
        except Exception as exc:  # the type and message are what is compared
            return f"ERR {type(exc).__name__}: {exc}"
    return f"{result.dtype} {result.tolist()!r}"


@pytest.mark.parametrize(("name", "expected"), DEFAULT)
def test_default_strategy_sum_with_axis_converts_as_a_tf_function(name: str, expected: str) -> None:
    st = ds.get_strategy()
    shown = _show(lambda: st.reduce("SUM", CASES[name], axis=0))
    assert shown[: len(expected)] == expected


def test_m2_sum_with_axis_converts_as_a_tf_function() -> None:
    st = ds.MirroredStrategy(["/cpu:0", "/cpu:1"])
    # TF 2.21, two logical CPUs: reduce("SUM", [True, 0], axis=0) -> int32 2;
    # reduce("SUM", [np.int64(2), 1], axis=0) -> int64 6
    assert _show(lambda: st.reduce("SUM", [True, 0], axis=0)) == "int32 2"
    assert _show(lambda: st.reduce("SUM", [np.int64(2), 1], axis=0)) == "int64 6"


def test_mean_with_axis_stays_eager() -> None:
    st = ds.get_strategy()
    # TF 2.21: reduce("MEAN", [x_int64, x_int64], axis=-1) fails on the list's missing .shape
    # (its MEAN step is not a tf.function; the list reaches ``v.shape``)
    x = np.array([1, 2], np.int64)
    assert _show(lambda: st.reduce("MEAN", [x, x], axis=-1)).startswith("ERR AttributeError")
