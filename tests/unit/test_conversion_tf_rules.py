"""Value conversion follows TF 2.21's rules (``tf.constant``/``convert_to_tensor``), pinned.

Every expectation below was printed by real TF 2.21 (``tf.constant(value)`` or
``tf.convert_to_tensor(value, dtype=...)``, shown as ``"<numpy dtype> <tolist()>"`` or
``"ERR <type>: <message>"``). TF's rule for Python sequences (``py_seq_tensor.cc``) is described
in ``mwms_mpi/_constant.py``. No MPI: strategies here are one-process ``MirroredStrategy`` and
the default strategy.
"""

from __future__ import annotations

import enum
import re
import tempfile
import warnings

import numpy as np
import pytest

import mwms_mpi
import mwms_mpi.distribute as ds
from mwms_mpi import errors
from mwms_mpi.values.convert import as_array, convert_to_dtype
from tests.support.conversion import show

# -- the cases (the probe's own names) -------------------------------------------------------


class E(enum.IntEnum):
    A = 3


class F(float):
    pass


scalars = {
    "i8": np.int8(2),
    "u8": np.uint8(1),
    "i16": np.int16(2),
    "i32": np.int32(1),
    "i64": np.int64(2),
    "u64": np.uint64(2),
    "f16": np.float16(1),
    "f32": np.float32(1),
    "f64": np.float64(1.5),
    "c64": np.complex64(1),
    "c128": np.complex128(1),
    "nb": np.bool_(True),
}
pys = {"int": 1, "big": 300, "int40": 2**40, "float": 2.5, "bool": True, "complex": 1 + 2j}
CASES = {}
for sn, s in scalars.items():
    CASES[f"[{sn}]"] = [s]
    for pn, p in pys.items():
        CASES[f"[{sn},{pn}]"] = [s, p]
        CASES[f"[{pn},{sn}]"] = [p, s]
for pn, p in pys.items():
    for qn, q in pys.items():
        CASES[f"[{pn},{qn}]"] = [p, q]
    CASES[pn] = p
CASES.update(
    {
        # lists holding arrays: tests/unit/test_autopack_tf_rules.py (TF packs tensors)
        "[[i64],[2.5]]": [[np.int64(1)], [2.5]],
        "[[f16],[2**20]]": [[np.float16(1)], [2**20]],
        "[f16,1e5]": [np.float16(1), 1e5],
        "[f16,70000]": [np.float16(1), 70000],
        "[f32,1e40]": [np.float32(1), 1e40],
        "[1e40]": [1e40],
        "1e40": 1e40,
        "[f64,1e300]": [np.float64(1), 1e300],
        "[f32,2**200]": [np.float32(1), 2**200],
        "[1,2**31]": [1, 2**31],
        "[2**63]": [2**63],
        "2**70": 2**70,
        "[1,2**70]": [1, 2**70],
        "[2**70,1.5]": [2**70, 1.5],
        "[1.5,2**70]": [1.5, 2**70],
        "[1.5,2**2000]": [1.5, 2**2000],
        "[i64,2**63]": [np.int64(1), 2**63],
        "[u64max]": [np.uint64(2**64 - 1)],
        "[1,[2]]": [1, [2]],
        "[[1],2]": [[1], 2],
        "[[1,2],[3]]": [[1, 2], [3]],
        "[]": [],
        "[[]]": [[]],
        "[[],[]]": [[], []],
        "()": (),
        "(1,2.)": (1, 2.0),
        "[[1],(2,)]": [[1], (2,)],
        "IntEnum": E.A,
        "[IntEnum,1]": [E.A, 1],
        "[1,IntEnum]": [1, E.A],
        "Fsub": F(1.5),
        "[Fsub,1]": [F(1.5), 1],
        "[True,1]": [True, 1],
        "[True,1.5]": [True, 1.5],
        "[1.5,True]": [1.5, True],
        "[1.5,nb]": [1.5, np.bool_(True)],
        "[nb,True]": [np.bool_(True), True],
        "[True,nb]": [True, np.bool_(False)],
        "[1j,True]": [1j, True],
        "[1j,nb]": [1j, np.bool_(True)],
        "[c64,f32]": [np.complex64(1), np.float32(2)],
        "['a',1]": ["a", 1],
        "[1,'a']": [1, "a"],
        "['a','b']": ["a", "b"],
        "[None]": [None],
        "[1,None]": [1, None],
        "[f32,None]": [np.float32(1), None],
        "nan": float("nan"),
        "[inf,1]": [float("inf"), 1],
        "[f16,inf]": [np.float16(1), float("inf")],
    }
)
DTYPES = [
    "float32",
    "float64",
    "float16",
    "int32",
    "int64",
    "uint8",
    "uint64",
    "bool",
    "complex128",
    "int8",
]
REQ = {
    "True": True,
    "[True,False]": [True, False],
    "2": 2,
    "0": 0,
    "[1,0]": [1, 0],
    "[1,2.]": [1, 2.0],
    "1.": 1.0,
    "[1.5]": [1.5],
    "1e40": 1e40,
    "[1e40]": [1e40],
    "2**70": 2**70,
    "[2**40]": [2**40],
    "[-1,300]": [-1, 300],
    "[nb]": [np.bool_(True)],
    "[f64]": [np.float64(1.5)],
    "[1j]": [1j],
    "[i64,1.5]": [np.int64(1), 1.5],
    "[f32,1e40]": [np.float32(1), 1e40],
    "[]": [],
    "[True,1]": [True, 1],
    "[2**63]": [2**63],
    "[-1]": [-1],
    "[u8s]": [np.uint8(3)],
    "IntEnum": E.A,
    "[1e300]": [1e300],
    "70000": 70000,
}


MIXED = "ERR ValueError: Can't convert Python sequence with mixed types to Tensor."
RAGGED = "ERR ValueError: Can't convert non-rectangular Python sequence to Tensor."
INT_RANGE = "ERR ValueError: Can't convert Python sequence with out-of-range integer to Tensor."
FLOAT_RANGE = (
    "ERR ValueError: Can't convert Python sequence with a value out of range for a "
    "double-precision float."
)


# TF 2.21: tf.constant(CASES[name])
TF_CONSTANT = [
    ("[f32,float]", "float32 [1.0, 2.5]"),
    ("[float,f32]", "float32 [2.5, 1.0]"),
    ("[i64,int]", "int32 [2, 1]"),
    ("[int,i64]", "int32 [1, 2]"),
    ("[f16,int]", "float16 [1.0, 1.0]"),
    ("[u8,big]", "int32 [1, 300]"),
    ("[big,u8]", "int32 [300, 1]"),
    ("[i8,float]", "float32 [2.0, 2.5]"),
    ("[float,i8]", "float32 [2.5, 2.0]"),
    ("[f64,int]", "float64 [1.5, 1.0]"),
    ("[int,f64]", "float32 [1.0, 1.5]"),
    ("[f64,float]", "float64 [1.5, 2.5]"),
    ("[f32,bool]", "float32 [1.0, 1.0]"),
    ("[bool,f32]", MIXED),
    ("[nb,int]", MIXED),
    ("[int,nb]", MIXED),
    ("[i32,complex]", MIXED),
    ("[complex,i32]", "complex128 [(1+2j), (1+0j)]"),
    ("[c64,float]", "complex128 [(1+0j), (2.5+0j)]"),
    ("[u64,int40]", "int64 [2, 1099511627776]"),
    ("[int,int40]", "int64 [1, 1099511627776]"),
    ("[int40,float]", "float32 [1099511627776.0, 2.5]"),
    (
        "[int40,complex]",
        MIXED,
    ),
    ("[int,bool]", "int32 [1, 1]"),
    ("[bool,int]", MIXED),
    ("[float,bool]", "float32 [2.5, 1.0]"),
    ("[i64,int40]", "int64 [2, 1099511627776]"),
    ("[f16,int40]", "float16 [1.0, inf]"),
    # lists holding arrays (tensors) are packed: tests/unit/test_autopack_tf_rules.py
    ("[[i64],[2.5]]", "float32 [[1.0], [2.5]]"),
    (
        "[f16,1e5]",
        FLOAT_RANGE,
    ),
    ("[f16,70000]", "float16 [1.0, inf]"),
    (
        "[f32,1e40]",
        FLOAT_RANGE,
    ),
    (
        "[1e40]",
        FLOAT_RANGE,
    ),
    (
        "1e40",
        FLOAT_RANGE,
    ),
    ("[f64,1e300]", "float64 [1.0, 1e+300]"),
    ("[f32,2**200]", "float32 [1.0, inf]"),
    (
        "[2**63]",
        INT_RANGE,
    ),
    ("2**70", INT_RANGE),
    (
        "[1,2**70]",
        INT_RANGE,
    ),
    (
        "[2**70,1.5]",
        INT_RANGE,
    ),
    ("[1.5,2**70]", "float32 [1.5, 1.1805916207174113e+21]"),
    (
        "[1.5,2**2000]",
        FLOAT_RANGE,
    ),
    ("[1,[2]]", MIXED),
    ("[[1],2]", RAGGED),
    ("[[1,2],[3]]", RAGGED),
    ("[[]]", "float32 [[]]"),
    ("[[],[]]", "float32 [[], []]"),
    ("(1,2.)", "float32 [1.0, 2.0]"),
    ("IntEnum", "int32 3"),
    ("[IntEnum,1]", "int32 [3, 1]"),
    ("Fsub", "float32 1.5"),
    ("[True,1.5]", MIXED),
    ("[1.5,nb]", MIXED),
    ("[nb,True]", "bool [True, True]"),
    ("[1j,True]", "complex128 [1j, (1+0j)]"),
    ("[1j,nb]", MIXED),
    ("[f16,inf]", "float16 [1.0, inf]"),
    ("[1,None]", MIXED),
]


@pytest.mark.parametrize(("name", "expected"), TF_CONSTANT)
def test_python_sequences_convert_as_tf_constant(name: str, expected: str) -> None:
    assert show(lambda: as_array(CASES[name])) == expected


def test_every_numpy_scalar_beside_every_python_number_as_tf() -> None:
    # TF 2.21: the dtype is the first element's kind; numpy's promotion plays no part.
    # np.float64 first -> float64; float16 first -> float16; other floats -> float32; numpy or
    # Python ints -> int32 (int64 past int32, float32 at a float); a bool first takes bools only.
    for sn in scalars:
        for pn in pys:
            for value in ([scalars[sn], pys[pn]], [pys[pn], scalars[sn]]):
                first = np.asarray(value[0]).dtype if isinstance(value[0], np.generic) else None
                got = show(lambda v=value: as_array(v))
                if first is not None and first.kind == "b" and pn != "bool":
                    assert "mixed types" in got, (value, got)
                elif first is not None and first == np.float64 and pn != "complex":
                    assert got.startswith("float64"), (value, got)


# TF 2.21: tf.convert_to_tensor(REQ[name], dtype=dtype)
TF_REQUESTED = [
    ("float32", "True", "float32 1.0"),
    ("float32", "[True,False]", "float32 [1.0, 0.0]"),
    ("float32", "2", "float32 2.0"),
    ("float32", "0", "float32 0.0"),
    ("float32", "[1,0]", "float32 [1.0, 0.0]"),
    ("float32", "[1,2.]", "float32 [1.0, 2.0]"),
    ("float32", "1.", "float32 1.0"),
    ("float32", "[1.5]", "float32 [1.5]"),
    ("float32", "1e40", "float32 inf"),
    ("float32", "[1e40]", "float32 [inf]"),
    ("float32", "2**70", "float32 1.1805916207174113e+21"),
    ("float32", "[2**40]", "float32 [1099511627776.0]"),
    ("float32", "[-1,300]", "float32 [-1.0, 300.0]"),
    ("float32", "[nb]", "ERR TypeError: Cannot convert [np.True_] to EagerTensor of dtype float"),
    ("float32", "[f64]", "float32 [1.5]"),
    ("float32", "[1j]", "ERR TypeError: Cannot convert [1j] to EagerTensor of dtype float"),
    ("float32", "[i64,1.5]", "float32 [1.0, 1.5]"),
    ("float32", "[f32,1e40]", "float32 [1.0, inf]"),
    ("float32", "[]", "float32 []"),
    ("float32", "[True,1]", "float32 [1.0, 1.0]"),
    ("float32", "[2**63]", "float32 [9.223372036854776e+18]"),
    ("float32", "[-1]", "float32 [-1.0]"),
    ("float32", "[u8s]", "float32 [3.0]"),
    ("float32", "IntEnum", "float32 3.0"),
    ("float32", "[1e300]", "float32 [inf]"),
    ("float32", "70000", "float32 70000.0"),
    ("int32", "True", "int32 1"),
    ("int32", "[True,False]", "int32 [1, 0]"),
    ("int32", "2", "int32 2"),
    ("int32", "0", "int32 0"),
    ("int32", "[1,0]", "int32 [1, 0]"),
    ("int32", "[1,2.]", "ERR TypeError: Cannot convert [1, 2.0] to EagerTensor of dtype int32"),
    ("int32", "1.", "ERR TypeError: Cannot convert 1.0 to EagerTensor of dtype int32"),
    ("int32", "[1.5]", "ERR TypeError: Cannot convert [1.5] to EagerTensor of dtype int32"),
    ("int32", "1e40", "ERR TypeError: Cannot convert 1e+40 to EagerTensor of dtype int32"),
    ("int32", "[1e40]", "ERR TypeError: Cannot convert [1e+40] to EagerTensor of dtype int32"),
    (
        "int32",
        "2**70",
        INT_RANGE,
    ),
    ("int32", "[2**40]", "int32 [0]"),
    ("int32", "[-1,300]", "int32 [-1, 300]"),
    ("int32", "[nb]", "ERR TypeError: Cannot convert [np.True_] to EagerTensor of dtype int32"),
    (
        "int32",
        "[f64]",
        "ERR TypeError: Cannot convert [np.float64(1.5)] to EagerTensor of dtype int32",
    ),
    ("int32", "[1j]", "ERR TypeError: Cannot convert [1j] to EagerTensor of dtype int32"),
    (
        "int32",
        "[i64,1.5]",
        "ERR TypeError: Cannot convert [np.int64(1), 1.5] to EagerTensor of dtype int32",
    ),
    (
        "int32",
        "[f32,1e40]",
        "ERR TypeError: Cannot convert [np.float32(1.0), 1e+40] to EagerTensor of dtype int32",
    ),
    ("int32", "[]", "int32 []"),
    ("int32", "[True,1]", "int32 [1, 1]"),
    (
        "int32",
        "[2**63]",
        INT_RANGE,
    ),
    ("int32", "[-1]", "int32 [-1]"),
    ("int32", "[u8s]", "int32 [3]"),
    ("int32", "IntEnum", "int32 3"),
    ("int32", "[1e300]", "ERR TypeError: Cannot convert [1e+300] to EagerTensor of dtype int32"),
    ("int32", "70000", "int32 70000"),
    ("bool", "True", "bool True"),
    ("bool", "[True,False]", "bool [True, False]"),
    ("bool", "2", "ERR TypeError: Cannot convert 2 to EagerTensor of dtype bool"),
    ("bool", "0", "ERR TypeError: Cannot convert 0 to EagerTensor of dtype bool"),
    ("bool", "[1,0]", "ERR TypeError: Cannot convert [1, 0] to EagerTensor of dtype bool"),
    ("bool", "[1,2.]", "ERR TypeError: Cannot convert [1, 2.0] to EagerTensor of dtype bool"),
    ("bool", "1.", "ERR TypeError: Cannot convert 1.0 to EagerTensor of dtype bool"),
    ("bool", "[1.5]", "ERR TypeError: Cannot convert [1.5] to EagerTensor of dtype bool"),
    ("bool", "1e40", "ERR TypeError: Cannot convert 1e+40 to EagerTensor of dtype bool"),
    ("bool", "[1e40]", "ERR TypeError: Cannot convert [1e+40] to EagerTensor of dtype bool"),
    (
        "bool",
        "2**70",
        INT_RANGE,
    ),
    (
        "bool",
        "[2**40]",
        "ERR TypeError: Cannot convert [1099511627776] to EagerTensor of dtype bool",
    ),
    ("bool", "[-1,300]", "ERR TypeError: Cannot convert [-1, 300] to EagerTensor of dtype bool"),
    ("bool", "[nb]", "bool [True]"),
    (
        "bool",
        "[f64]",
        "ERR TypeError: Cannot convert [np.float64(1.5)] to EagerTensor of dtype bool",
    ),
    ("bool", "[1j]", "ERR TypeError: Cannot convert [1j] to EagerTensor of dtype bool"),
    (
        "bool",
        "[i64,1.5]",
        "ERR TypeError: Cannot convert [np.int64(1), 1.5] to EagerTensor of dtype bool",
    ),
    (
        "bool",
        "[f32,1e40]",
        "ERR TypeError: Cannot convert [np.float32(1.0), 1e+40] to EagerTensor of dtype bool",
    ),
    ("bool", "[]", "bool []"),
    (
        "bool",
        "[True,1]",
        MIXED,
    ),
    (
        "bool",
        "[2**63]",
        INT_RANGE,
    ),
    ("bool", "[-1]", "ERR TypeError: Cannot convert [-1] to EagerTensor of dtype bool"),
    ("bool", "[u8s]", "ERR TypeError: Cannot convert [np.uint8(3)] to EagerTensor of dtype bool"),
    ("bool", "IntEnum", "ERR TypeError: Cannot convert <E.A: 3> to EagerTensor of dtype bool"),
    ("bool", "[1e300]", "ERR TypeError: Cannot convert [1e+300] to EagerTensor of dtype bool"),
    ("bool", "70000", "ERR TypeError: Cannot convert 70000 to EagerTensor of dtype bool"),
    ("uint8", "True", "ERR TypeError: Cannot convert True to EagerTensor of dtype uint8"),
    (
        "uint8",
        "[True,False]",
        "ERR TypeError: Cannot convert [True, False] to EagerTensor of dtype uint8",
    ),
    ("uint8", "2", "uint8 2"),
    ("uint8", "0", "uint8 0"),
    ("uint8", "[1,0]", "uint8 [1, 0]"),
    ("uint8", "[1,2.]", "ERR TypeError: Cannot convert [1, 2.0] to EagerTensor of dtype uint8"),
    ("uint8", "1.", "ERR TypeError: Cannot convert 1.0 to EagerTensor of dtype uint8"),
    ("uint8", "[1.5]", "ERR TypeError: Cannot convert [1.5] to EagerTensor of dtype uint8"),
    ("uint8", "1e40", "ERR TypeError: Cannot convert 1e+40 to EagerTensor of dtype uint8"),
    ("uint8", "[1e40]", "ERR TypeError: Cannot convert [1e+40] to EagerTensor of dtype uint8"),
    (
        "uint8",
        "2**70",
        INT_RANGE,
    ),
    ("uint8", "[2**40]", "uint8 [0]"),
    ("uint8", "[-1,300]", "uint8 [255, 44]"),
    ("uint8", "[nb]", "ERR TypeError: Cannot convert [np.True_] to EagerTensor of dtype uint8"),
    (
        "uint8",
        "[f64]",
        "ERR TypeError: Cannot convert [np.float64(1.5)] to EagerTensor of dtype uint8",
    ),
    ("uint8", "[1j]", "ERR TypeError: Cannot convert [1j] to EagerTensor of dtype uint8"),
    (
        "uint8",
        "[i64,1.5]",
        "ERR TypeError: Cannot convert [np.int64(1), 1.5] to EagerTensor of dtype uint8",
    ),
    (
        "uint8",
        "[f32,1e40]",
        "ERR TypeError: Cannot convert [np.float32(1.0), 1e+40] to EagerTensor of dtype uint8",
    ),
    ("uint8", "[]", "uint8 []"),
    (
        "uint8",
        "[True,1]",
        MIXED,
    ),
    (
        "uint8",
        "[2**63]",
        INT_RANGE,
    ),
    ("uint8", "[-1]", "uint8 [255]"),
    ("uint8", "[u8s]", "uint8 [3]"),
    ("uint8", "IntEnum", "uint8 3"),
    ("uint8", "[1e300]", "ERR TypeError: Cannot convert [1e+300] to EagerTensor of dtype uint8"),
    ("uint8", "70000", "uint8 112"),
]


@pytest.mark.parametrize(("dtype", "name", "expected"), TF_REQUESTED)
def test_python_values_convert_to_a_requested_dtype_as_tf(
    dtype: str, name: str, expected: str
) -> None:
    assert show(lambda: convert_to_dtype(REQ[name], dtype)) == expected


def test_uint64_out_of_range_is_a_value_error() -> None:
    # TF 2.21: SystemError ("returned a result with an exception set"), a TF bug; here TF's
    # out-of-range ValueError rather than a wrapped value.
    with pytest.raises(ValueError, match="out-of-range integer"):
        convert_to_dtype([-1], np.uint64)


def test_variables_take_python_values_as_tf() -> None:
    # TF 2.21: tf.Variable(True, dtype=tf.float32) -> 1.0; tf.Variable([1, True]) -> int32 [1, 1]
    assert show(lambda: mwms_mpi.Variable(True, dtype=np.float32).numpy()) == "float32 1.0"
    assert show(lambda: mwms_mpi.Variable([1, True]).numpy()) == "int32 [1, 1]"
    # TF 2.21: tf.Variable([np.float32(1), 2.5]).dtype float32; [np.int64(2), 1] int32
    assert mwms_mpi.Variable([np.float32(1), 2.5]).dtype == np.float32
    assert mwms_mpi.Variable([np.int64(2), 1]).dtype == np.int32
    # TF 2.21: ValueError Can't convert Python sequence with out-of-range integer to Tensor.
    with pytest.raises(ValueError, match=re.escape("out-of-range integer to Tensor.")):
        mwms_mpi.Variable(2**70)
    # TF 2.21: ValueError ... a value out of range for a double-precision float.
    with pytest.raises(ValueError, match="out of range for a double-precision float"):
        mwms_mpi.Variable(1e40)
    # TF 2.21: tf.Variable(1e40, dtype=tf.float32) -> inf (converted as double, then cast)
    assert show(lambda: mwms_mpi.Variable(1e40, dtype=np.float32).numpy()) == "float32 inf"
    # TF 2.21: TypeError Cannot convert 2 to EagerTensor of dtype bool
    with pytest.raises(TypeError, match=r"^Cannot convert 2 to EagerTensor of dtype bool$"):
        mwms_mpi.Variable(2, dtype=bool)


def test_assignments_convert_as_tf() -> None:
    v = mwms_mpi.Variable(np.zeros(2, np.float32))
    v.assign([True, False])  # TF 2.21: float32 [1.0, 0.0]
    assert v.numpy().tolist() == [1.0, 0.0]
    w = mwms_mpi.Variable(np.zeros(2, np.int32))
    w.assign_add([True, True])  # TF 2.21: int32 [1, 1]
    assert w.numpy().tolist() == [1, 1]
    b = mwms_mpi.Variable(np.zeros(2, bool))
    # TF 2.21: TypeError Cannot convert [1, 0] to EagerTensor of dtype bool
    with pytest.raises(
        TypeError, match=re.escape("Cannot convert [1, 0] to EagerTensor of dtype bool")
    ):
        b.assign([1, 0])
    # TF 2.21: InvalidArgumentError No OpKernel was registered to support Op
    # 'AssignAddVariableOp' used by {{node AssignAddVariableOp}} with these attrs: [dtype=DT_BOOL]
    message = (
        "No OpKernel was registered to support Op 'AssignAddVariableOp' used by "
        "{{node AssignAddVariableOp}} with these attrs: [dtype=DT_BOOL]"
    )
    with pytest.raises(errors.InvalidArgumentError, match=re.escape(message)):
        b.assign_add(np.array([True, True]))
    with pytest.raises(errors.InvalidArgumentError, match="'AssignSubVariableOp'"):
        b.assign_sub(np.array([True, True]))
    assert b.numpy().tolist() == [False, False]


def test_numpy_arrays_as_tf() -> None:
    # TF 2.21: tf.constant(np.array([1., 2.], '>f4')) -> native float32
    big = as_array(np.array([1.0, 2.0], ">f4"))
    assert big.dtype.isnative and big.dtype == np.float32 and big.tolist() == [1.0, 2.0]
    assert mwms_mpi.Variable(np.array([1, 2], ">i8")).numpy().dtype.str == "<i8"
    # TF 2.21: tf.convert_to_tensor([tf.constant(np.array([1, 2], '>i8'))]) -> int64 [[1, 2]]
    # (an array in a list is a tensor, docs/architecture.md "Arrays are tensors"; TF's
    # tf.constant([np.array([1, 2], '>i8')]) is int32)
    assert show(lambda: as_array([np.array([1, 2], ">i8")])) == "int64 [[1, 2]]"
    # TF 2.21: ValueError Failed to convert a NumPy array to a Tensor (Unsupported object type int).
    message = "Failed to convert a NumPy array to a Tensor (Unsupported object type int)."
    with pytest.raises(ValueError, match=re.escape(message)):
        mwms_mpi.Variable(np.array([1, 2], dtype=object))
    with pytest.raises(ValueError, match=re.escape("(Unsupported object type NoneType).")):
        as_array(np.array([None], dtype=object))
    # TF 2.21: convert_to_tensor(np.array([1, 2], object), dtype=tf.float32) -> float32 [1.0, 2.0]
    assert (
        show(lambda: convert_to_dtype(np.array([1, 2], object), np.float32)) == "float32 [1.0, 2.0]"
    )
    # TF 2.21: tf.constant([np.array([1, 2], object)]) -> int32 [[1, 2]] (elements convert)
    assert show(lambda: as_array([np.array([1, 2], object)])) == "int32 [[1, 2]]"
    # TF 2.21: tf.constant(np.array(["a", "bc"])) -> tf.string [b'a', b'bc'] (bytes here)
    assert as_array(np.array(["a", "bc"])).tolist() == [b"a", b"bc"]


def test_ndarray_subclasses_as_tf() -> None:
    path = tempfile.mktemp(suffix=".npy")
    np.save(path, np.arange(3, dtype=np.float32))
    mapped = np.load(path, mmap_mode="r")
    # TF 2.21: memmap -> float32 [0.0, 1.0, 2.0]; a masked array -> its data, float64 [1.0, 2.0];
    # np.matrix([[1., 2.]]) -> float64 [[1.0, 2.0]]
    assert show(lambda: mwms_mpi.Variable(mapped).numpy()) == "float32 [0.0, 1.0, 2.0]"
    masked = np.ma.array([1.0, 2.0], mask=[0, 1])
    assert show(lambda: mwms_mpi.Variable(masked).numpy()) == "float64 [1.0, 2.0]"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PendingDeprecationWarning)  # numpy's, on np.matrix
        matrix = np.matrix([[1.0, 2.0]])
    assert show(lambda: as_array(matrix)) == "float64 [[1.0, 2.0]]"
    assert type(as_array(masked)) is np.ndarray


def test_default_strategy_all_reduce_and_all_gather_return_new_arrays() -> None:
    # TF 2.21: the default strategy's all_reduce returns a new EagerTensor, not its input
    st = ds.get_strategy()
    x = np.arange(3.0)
    r = st.run(lambda: ds.get_replica_context().all_reduce("SUM", x))
    g = st.run(lambda: ds.get_replica_context().all_gather(x, axis=0))
    assert r is not x and g is not x
    x[:] = -1
    assert r.tolist() == [0.0, 1.0, 2.0] and g.tolist() == [0.0, 1.0, 2.0]


def test_default_strategy_results_of_foreign_arrays_are_numpy() -> None:
    jnp = pytest.importorskip("jax.numpy")
    st = ds.get_strategy()
    assert type(st.reduce("SUM", jnp.ones(2), axis=None)) is np.ndarray
    assert type(st.gather(jnp.ones(2), axis=0)) is np.ndarray
