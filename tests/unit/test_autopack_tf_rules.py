"""Lists and tuples that hold arrays convert as TF's autopacking converts lists of tensors.

docs/architecture.md, "Arrays are tensors": every expected string is TF 2.21's
``tf.convert_to_tensor(CASES[name], dtype)`` with each array of the case made a
``tf.constant`` of it (numpy arrays themselves inside a list take ``tf.constant``'s sequence
rule in TF: ``[np.int64(2) array]`` is int32 there; here they are tensors, and keep int64).
"""

from __future__ import annotations

import collections
from typing import Any

import numpy as np
import pytest

import mwms_mpi
from mwms_mpi import distribute as ds
from mwms_mpi.data import Dataset
from mwms_mpi.values.convert import as_array, convert_to_dtype
from tests.support.conversion import show

I64 = np.array(2, np.int64)
CASES: dict[str, Any] = {
    "[a0d_f64,2]": [np.array(1.5), 2],
    "[2,a0d_f64]": [2, np.array(1.5)],
    "[a0d_i64,2]": [np.array(3), 2],
    "[a0d_f32,2.5]": [np.array(1, np.float32), 2.5],
    "[a1_f32,[1.,2.]]": [np.zeros(2, np.float32), [1.0, 2.0]],
    "[[1.,2.],a1_f32]": [[1.0, 2.0], np.zeros(2, np.float32)],
    "[a1_i64,a1_i64]": [np.arange(2), np.arange(2)],
    "[a1_i64,[1.5,2]]": [np.arange(2), [1.5, 2]],
    "[a1_f64,a1_f32]": [np.ones(1), np.zeros(1, np.float32)],
    "[a1_f32,a1_f64]": [np.zeros(1, np.float32), np.ones(1)],
    "[a1_u8,[300,1]]": [np.ones(2, np.uint8), [300, 1]],
    "[a1_bool,[1,0]]": [np.ones(2, bool), [1, 0]],
    "[>i8]": [np.array([1, 2], ">i8")],
    "[i64,1,2**40]": [I64, 1, 2**40],
    "[i32,2**40]": [np.array(1, np.int32), 2**40],
    "[f16,1,70000]": [np.array(1, np.float16), 1, 70000],
    "[f32,1e300]": [np.array(1, np.float32), 1e300],
    "[[1],[i64]]": [[1], [I64]],
    "[i32,1,i64]": [np.array(1, np.int32), 1, I64],
    "[[f32,f64]]": [[np.array(1.5, np.float32), np.array(2.5)]],
    "[[i32,i32],[i64,i64]]": [[np.array(1, np.int32)] * 2, [I64] * 2],
    "[a1_f32,f32]": [np.zeros(2, np.float32), np.array(1, np.float32)],
    "[b,1]": [np.array(True), 1],
    "[b,True]": [np.array(True), True],
    "[str,b'x']": [np.array(b"ab"), b"x"],
    "[i64,1.5]": [I64, 1.5],
    "[f32,np.float64(3.5)]": [np.array(1.5, np.float32), np.float64(3.5)],
    "[f32,(1.,),2.]": [np.array(1, np.float32), (1.0,), 2.0],
    "[[],[f32]]": [[], [np.array(1, np.float32)]],
    "[m,1,h]": [np.array([[1, 2], [3, 4]]), 1, np.array(0.5, np.float16)],
    "[obj_a1]": [np.array([1, 2], object)],
    "[f32,None]": [np.array(1, np.float32), None],
}

# TF 2.21: tf.convert_to_tensor(CASES[name] with tensors for arrays, dtype=requested); the
# message of a Pack of no inputs is cut before its KernelDef, whose text varies between runs
PACKED = [
    ("[a0d_f64,2]", "None", "float64 [1.5, 2.0]"),
    ("[a0d_f64,2]", "int64", "int64 [1, 2]"),
    ("[a0d_f64,2]", "float16", "float16 [1.5, 2.0]"),
    ("[a0d_f64,2]", "int32", "int32 [1, 2]"),
    ("[2,a0d_f64]", "None", "float64 [2.0, 1.5]"),
    ("[2,a0d_f64]", "int64", "int64 [2, 1]"),
    ("[2,a0d_f64]", "float16", "float16 [2.0, 1.5]"),
    ("[2,a0d_f64]", "int32", "int32 [2, 1]"),
    ("[a0d_i64,2]", "None", "int64 [3, 2]"),
    ("[a0d_i64,2]", "int64", "int64 [3, 2]"),
    ("[a0d_i64,2]", "float16", "float16 [3.0, 2.0]"),
    ("[a0d_i64,2]", "int32", "int32 [3, 2]"),
    ("[a0d_f32,2.5]", "None", "float32 [1.0, 2.5]"),
    (
        "[a0d_f32,2.5]",
        "int64",
        ("ERR TypeError: Cannot convert 2.5 to EagerTensor of dtype int64"),
    ),
    ("[a0d_f32,2.5]", "float16", "float16 [1.0, 2.5]"),
    (
        "[a0d_f32,2.5]",
        "int32",
        ("ERR TypeError: Cannot convert 2.5 to EagerTensor of dtype int32"),
    ),
    ("[a1_f32,[1.,2.]]", "None", "float32 [[0.0, 0.0], [1.0, 2.0]]"),
    (
        "[a1_f32,[1.,2.]]",
        "int64",
        ("ERR TypeError: Cannot convert [1.0, 2.0] to EagerTensor of dtype int64"),
    ),
    ("[a1_f32,[1.,2.]]", "float16", "float16 [[0.0, 0.0], [1.0, 2.0]]"),
    (
        "[a1_f32,[1.,2.]]",
        "int32",
        ("ERR TypeError: Cannot convert [1.0, 2.0] to EagerTensor of dtype int32"),
    ),
    ("[[1.,2.],a1_f32]", "None", "float32 [[1.0, 2.0], [0.0, 0.0]]"),
    (
        "[[1.,2.],a1_f32]",
        "int64",
        ("ERR TypeError: Cannot convert [1.0, 2.0] to EagerTensor of dtype int64"),
    ),
    ("[[1.,2.],a1_f32]", "float16", "float16 [[1.0, 2.0], [0.0, 0.0]]"),
    (
        "[[1.,2.],a1_f32]",
        "int32",
        ("ERR TypeError: Cannot convert [1.0, 2.0] to EagerTensor of dtype int32"),
    ),
    ("[a1_i64,a1_i64]", "None", "int64 [[0, 1], [0, 1]]"),
    ("[a1_i64,a1_i64]", "int64", "int64 [[0, 1], [0, 1]]"),
    ("[a1_i64,a1_i64]", "float16", "float16 [[0.0, 1.0], [0.0, 1.0]]"),
    ("[a1_i64,a1_i64]", "int32", "int32 [[0, 1], [0, 1]]"),
    (
        "[a1_i64,[1.5,2]]",
        "None",
        ("ERR TypeError: Cannot convert [1.5, 2] to EagerTensor of dtype int64"),
    ),
    (
        "[a1_i64,[1.5,2]]",
        "int64",
        ("ERR TypeError: Cannot convert [1.5, 2] to EagerTensor of dtype int64"),
    ),
    ("[a1_i64,[1.5,2]]", "float16", "float16 [[0.0, 1.0], [1.5, 2.0]]"),
    (
        "[a1_i64,[1.5,2]]",
        "int32",
        ("ERR TypeError: Cannot convert [1.5, 2] to EagerTensor of dtype int32"),
    ),
    (
        "[a1_f64,a1_f32]",
        "None",
        (
            "ERR InvalidArgumentError: cannot compute Pack as input #1(zero-based) "
            "was expected to be a double tensor but is a float tensor [Op:Pack] nam"
            "e: packed"
        ),
    ),
    ("[a1_f64,a1_f32]", "int64", "int64 [[1], [0]]"),
    ("[a1_f64,a1_f32]", "float16", "float16 [[1.0], [0.0]]"),
    ("[a1_f64,a1_f32]", "int32", "int32 [[1], [0]]"),
    (
        "[a1_f32,a1_f64]",
        "None",
        (
            "ERR InvalidArgumentError: cannot compute Pack as input #1(zero-based) "
            "was expected to be a float tensor but is a double tensor [Op:Pack] nam"
            "e: packed"
        ),
    ),
    ("[a1_f32,a1_f64]", "int64", "int64 [[0], [1]]"),
    ("[a1_f32,a1_f64]", "float16", "float16 [[0.0], [1.0]]"),
    ("[a1_f32,a1_f64]", "int32", "int32 [[0], [1]]"),
    ("[a1_u8,[300,1]]", "None", "uint8 [[1, 1], [44, 1]]"),
    ("[a1_u8,[300,1]]", "int64", "int64 [[1, 1], [300, 1]]"),
    ("[a1_u8,[300,1]]", "float16", "float16 [[1.0, 1.0], [300.0, 1.0]]"),
    ("[a1_u8,[300,1]]", "int32", "int32 [[1, 1], [300, 1]]"),
    (
        "[a1_bool,[1,0]]",
        "None",
        ("ERR TypeError: Cannot convert [1, 0] to EagerTensor of dtype bool"),
    ),
    ("[a1_bool,[1,0]]", "int64", "int64 [[1, 1], [1, 0]]"),
    ("[a1_bool,[1,0]]", "float16", "float16 [[1.0, 1.0], [1.0, 0.0]]"),
    ("[a1_bool,[1,0]]", "int32", "int32 [[1, 1], [1, 0]]"),
    ("[>i8]", "None", "int64 [[1, 2]]"),
    ("[>i8]", "int64", "int64 [[1, 2]]"),
    ("[>i8]", "float16", "float16 [[1.0, 2.0]]"),
    ("[>i8]", "int32", "int32 [[1, 2]]"),
    ("[i64,1,2**40]", "None", "int64 [2, 1, 1099511627776]"),
    ("[i64,1,2**40]", "int64", "int64 [2, 1, 1099511627776]"),
    ("[i64,1,2**40]", "float16", "float16 [2.0, 1.0, inf]"),
    ("[i64,1,2**40]", "int32", "int32 [2, 1, 0]"),
    ("[i32,2**40]", "None", "int32 [1, 0]"),
    ("[i32,2**40]", "int64", "int64 [1, 1099511627776]"),
    ("[i32,2**40]", "float16", "float16 [1.0, inf]"),
    ("[i32,2**40]", "int32", "int32 [1, 0]"),
    ("[f16,1,70000]", "None", "float16 [1.0, 1.0, inf]"),
    ("[f16,1,70000]", "int64", "int64 [1, 1, 70000]"),
    ("[f16,1,70000]", "float16", "float16 [1.0, 1.0, inf]"),
    ("[f16,1,70000]", "int32", "int32 [1, 1, 70000]"),
    ("[f32,1e300]", "None", "float32 [1.0, inf]"),
    (
        "[f32,1e300]",
        "int64",
        ("ERR TypeError: Cannot convert 1e+300 to EagerTensor of dtype int64"),
    ),
    ("[f32,1e300]", "float16", "float16 [1.0, inf]"),
    (
        "[f32,1e300]",
        "int32",
        ("ERR TypeError: Cannot convert 1e+300 to EagerTensor of dtype int32"),
    ),
    ("[[1],[i64]]", "None", "int64 [[1], [2]]"),
    ("[[1],[i64]]", "int64", "int64 [[1], [2]]"),
    ("[[1],[i64]]", "float16", "float16 [[1.0], [2.0]]"),
    ("[[1],[i64]]", "int32", "int32 [[1], [2]]"),
    (
        "[i32,1,i64]",
        "None",
        (
            "ERR TypeError: Cannot convert a list containing a tensor of dtype <dty"
            "pe: 'int64'> to <dtype: 'int32'> (Tensor is: <tf.Tensor: shape=(), dty"
            "pe=int64, numpy=2>)"
        ),
    ),
    ("[i32,1,i64]", "int64", "int64 [1, 1, 2]"),
    ("[i32,1,i64]", "float16", "float16 [1.0, 1.0, 2.0]"),
    (
        "[i32,1,i64]",
        "int32",
        (
            "ERR TypeError: Cannot convert a list containing a tensor of dtype <dty"
            "pe: 'int64'> to <dtype: 'int32'> (Tensor is: <tf.Tensor: shape=(), dty"
            "pe=int64, numpy=2>)"
        ),
    ),
    (
        "[[f32,f64]]",
        "None",
        (
            "ERR InvalidArgumentError: cannot compute Pack as input #1(zero-based) "
            "was expected to be a float tensor but is a double tensor [Op:Pack] nam"
            "e: 0"
        ),
    ),
    ("[[f32,f64]]", "int64", "int64 [[1, 2]]"),
    ("[[f32,f64]]", "float16", "float16 [[1.5, 2.5]]"),
    ("[[f32,f64]]", "int32", "int32 [[1, 2]]"),
    (
        "[[i32,i32],[i64,i64]]",
        "None",
        (
            "ERR InvalidArgumentError: cannot compute Pack as input #1(zero-based) "
            "was expected to be a int32 tensor but is a int64 tensor [Op:Pack] name"
            ": "
        ),
    ),
    ("[[i32,i32],[i64,i64]]", "int64", "int64 [[1, 1], [2, 2]]"),
    ("[[i32,i32],[i64,i64]]", "float16", "float16 [[1.0, 1.0], [2.0, 2.0]]"),
    (
        "[[i32,i32],[i64,i64]]",
        "int32",
        (
            "ERR InvalidArgumentError: cannot compute Pack as input #1(zero-based) "
            "was expected to be a int32 tensor but is a int64 tensor [Op:Pack] name"
            ": "
        ),
    ),
    (
        "[a1_f32,f32]",
        "None",
        (
            "ERR InvalidArgumentError: {{function_node __wrapped__Pack_N_2_device_/"
            "job:localhost/replica:0/task:0/device:CPU:0}} Shapes of all inputs mus"
            "t match: values[0].shape = [2] != va"
        ),
    ),
    (
        "[a1_f32,f32]",
        "int64",
        (
            "ERR InvalidArgumentError: {{function_node __wrapped__Pack_N_2_device_/"
            "job:localhost/replica:0/task:0/device:CPU:0}} Shapes of all inputs mus"
            "t match: values[0].shape = [2] != va"
        ),
    ),
    (
        "[a1_f32,f32]",
        "float16",
        (
            "ERR InvalidArgumentError: {{function_node __wrapped__Pack_N_2_device_/"
            "job:localhost/replica:0/task:0/device:CPU:0}} Shapes of all inputs mus"
            "t match: values[0].shape = [2] != va"
        ),
    ),
    (
        "[a1_f32,f32]",
        "int32",
        (
            "ERR InvalidArgumentError: {{function_node __wrapped__Pack_N_2_device_/"
            "job:localhost/replica:0/task:0/device:CPU:0}} Shapes of all inputs mus"
            "t match: values[0].shape = [2] != va"
        ),
    ),
    (
        "[b,1]",
        "None",
        ("ERR TypeError: Cannot convert 1 to EagerTensor of dtype bool"),
    ),
    ("[b,1]", "int64", "int64 [1, 1]"),
    ("[b,1]", "float16", "float16 [1.0, 1.0]"),
    ("[b,1]", "int32", "int32 [1, 1]"),
    ("[b,True]", "None", "bool [True, True]"),
    ("[b,True]", "int64", "int64 [1, 1]"),
    ("[b,True]", "float16", "float16 [1.0, 1.0]"),
    ("[b,True]", "int32", "int32 [1, 1]"),
    ("[str,b'x']", "None", "object [b'ab', b'x']"),
    (
        "[str,b'x']",
        "int64",
        (
            "ERR UnimplementedError: {{function_node __wrapped__Cast_device_/job:lo"
            "calhost/replica:0/task:0/device:CPU:0}} Cast string to int64 is not su"
            "pported [Op:Cast] name: "
        ),
    ),
    (
        "[str,b'x']",
        "float16",
        (
            "ERR UnimplementedError: {{function_node __wrapped__Cast_device_/job:lo"
            "calhost/replica:0/task:0/device:CPU:0}} Cast string to half is not sup"
            "ported [Op:Cast] name: "
        ),
    ),
    (
        "[str,b'x']",
        "int32",
        (
            "ERR UnimplementedError: {{function_node __wrapped__Cast_device_/job:lo"
            "calhost/replica:0/task:0/device:CPU:0}} Cast string to int32 is not su"
            "pported [Op:Cast] name: "
        ),
    ),
    (
        "[i64,1.5]",
        "None",
        ("ERR TypeError: Cannot convert 1.5 to EagerTensor of dtype int64"),
    ),
    (
        "[i64,1.5]",
        "int64",
        ("ERR TypeError: Cannot convert 1.5 to EagerTensor of dtype int64"),
    ),
    ("[i64,1.5]", "float16", "float16 [2.0, 1.5]"),
    (
        "[i64,1.5]",
        "int32",
        ("ERR TypeError: Cannot convert 1.5 to EagerTensor of dtype int32"),
    ),
    ("[f32,np.float64(3.5)]", "None", "float32 [1.5, 3.5]"),
    ("[f32,np.float64(3.5)]", "int64", "int64 [1, 3]"),
    ("[f32,np.float64(3.5)]", "float16", "float16 [1.5, 3.5]"),
    ("[f32,np.float64(3.5)]", "int32", "int32 [1, 3]"),
    (
        "[f32,(1.,),2.]",
        "None",
        (
            "ERR InvalidArgumentError: {{function_node __wrapped__Pack_N_3_device_/"
            "job:localhost/replica:0/task:0/device:CPU:0}} Shapes of all inputs mus"
            "t match: values[0].shape = [] != val"
        ),
    ),
    (
        "[f32,(1.,),2.]",
        "int64",
        ("ERR TypeError: Cannot convert [1.0] to EagerTensor of dtype int64"),
    ),
    (
        "[f32,(1.,),2.]",
        "float16",
        (
            "ERR InvalidArgumentError: {{function_node __wrapped__Pack_N_3_device_/"
            "job:localhost/replica:0/task:0/device:CPU:0}} Shapes of all inputs mus"
            "t match: values[0].shape = [] != val"
        ),
    ),
    (
        "[f32,(1.,),2.]",
        "int32",
        ("ERR TypeError: Cannot convert [1.0] to EagerTensor of dtype int32"),
    ),
    (
        "[[],[f32]]",
        "None",
        (
            "ERR InvalidArgumentError: OpKernel 'Pack' has constraint on attr 'T' n"
            "ot in NodeDef '[N=0, axis=0]'"
        ),
    ),
    (
        "[[],[f32]]",
        "int64",
        (
            "ERR InvalidArgumentError: OpKernel 'Pack' has constraint on attr 'T' n"
            "ot in NodeDef '[N=0, axis=0]'"
        ),
    ),
    (
        "[[],[f32]]",
        "float16",
        (
            "ERR InvalidArgumentError: OpKernel 'Pack' has constraint on attr 'T' n"
            "ot in NodeDef '[N=0, axis=0]'"
        ),
    ),
    (
        "[[],[f32]]",
        "int32",
        (
            "ERR InvalidArgumentError: OpKernel 'Pack' has constraint on attr 'T' n"
            "ot in NodeDef '[N=0, axis=0]'"
        ),
    ),
    (
        "[m,1,h]",
        "None",
        (
            "ERR TypeError: Cannot convert a list containing a tensor of dtype <dty"
            "pe: 'float16'> to <dtype: 'int64'> (Tensor is: <tf.Tensor: shape=(), d"
            "type=float16, numpy=0.5>)"
        ),
    ),
    (
        "[m,1,h]",
        "int64",
        (
            "ERR TypeError: Cannot convert a list containing a tensor of dtype <dty"
            "pe: 'float16'> to <dtype: 'int64'> (Tensor is: <tf.Tensor: shape=(), d"
            "type=float16, numpy=0.5>)"
        ),
    ),
    (
        "[m,1,h]",
        "float16",
        (
            "ERR InvalidArgumentError: {{function_node __wrapped__Pack_N_3_device_/"
            "job:localhost/replica:0/task:0/device:CPU:0}} Shapes of all inputs mus"
            "t match: values[0].shape = [2,2] != "
        ),
    ),
    (
        "[m,1,h]",
        "int32",
        (
            "ERR InvalidArgumentError: {{function_node __wrapped__Pack_N_3_device_/"
            "job:localhost/replica:0/task:0/device:CPU:0}} Shapes of all inputs mus"
            "t match: values[0].shape = [2,2] != "
        ),
    ),
    ("[obj_a1]", "None", "int32 [[1, 2]]"),
    ("[obj_a1]", "int64", "int64 [[1, 2]]"),
    ("[obj_a1]", "float16", "float16 [[1.0, 2.0]]"),
    ("[obj_a1]", "int32", "int32 [[1, 2]]"),
    (
        "[f32,None]",
        "None",
        (
            "ERR ValueError: Attempt to convert a value (None) with an unsupported "
            "type (<class 'NoneType'>) to a Tensor."
        ),
    ),
    (
        "[f32,None]",
        "int64",
        (
            "ERR ValueError: Attempt to convert a value (None) with an unsupported "
            "type (<class 'NoneType'>) to a Tensor."
        ),
    ),
    (
        "[f32,None]",
        "float16",
        (
            "ERR ValueError: Attempt to convert a value (None) with an unsupported "
            "type (<class 'NoneType'>) to a Tensor."
        ),
    ),
    (
        "[f32,None]",
        "int32",
        (
            "ERR ValueError: Attempt to convert a value (None) with an unsupported "
            "type (<class 'NoneType'>) to a Tensor."
        ),
    ),
]


@pytest.mark.parametrize(("name", "requested", "expected"), PACKED)
def test_lists_holding_arrays_pack_as_tf_packs_tensors(
    name: str, requested: str, expected: str
) -> None:
    value = CASES[name]
    if requested == "None":
        shown = show(lambda: as_array(value))
    else:
        shown = show(lambda: convert_to_dtype(value, requested))
    assert shown[: len(expected)] == expected


def test_a_tuple_of_int64_keeps_int64_through_the_apis() -> None:
    x = np.array([1, 2], np.int64)
    st = ds.get_strategy()
    # TF 2.21 (tensors for arrays): default strategy reduce("SUM", (x,), axis=-1) -> int64 [3];
    # tf.Variable([x_int64_scalar, 3]) -> int64 [2, 3]; Dataset.from_tensors([x, x]) -> int64
    # [[1, 2], [1, 2]]; from_tensor_slices(([x, x],)) -> first element int64 [1, 2]
    assert show(lambda: st.reduce("SUM", (x,), axis=-1)) == "int64 [3]"
    assert show(lambda: mwms_mpi.Variable([I64, 3]).numpy()) == "int64 [2, 3]"
    assert show(lambda: next(iter(Dataset.from_tensors([x, x])))) == "int64 [[1, 2], [1, 2]]"
    first = next(iter(Dataset.from_tensor_slices(([x, x],))))[0]
    assert show(lambda: first) == "int64 [1, 2]"
    # TF 2.21: Dataset.from_tensors(x_int64).map(lambda x: ([x, 1],)) -> int64 [2, 1]
    mapped = Dataset.from_tensors(I64).map(lambda v: ([v, 1],))
    assert show(lambda: next(iter(mapped))[0]) == "int64 [2, 1]"


def test_a_variable_inside_a_list_is_packed_as_a_tensor() -> None:
    # TF 2.21: tf.convert_to_tensor([tf.Variable(int64 2), 1]) -> int64 [2, 1]
    v = mwms_mpi.Variable(I64)
    assert show(lambda: as_array([v, 1])) == "int64 [2, 1]"
    # TF 2.21: ... dtype=tf.float32 -> float32 [2.0, 1.0]
    assert show(lambda: convert_to_dtype([v, 1], np.float32)) == "float32 [2.0, 1.0]"


def test_m2_reduce_of_a_tuple_of_per_replica_int64_is_int64() -> None:
    st = ds.MirroredStrategy(["/cpu:0", "/cpu:1"])
    pr = st.experimental_distribute_values_from_function(
        lambda c: np.array([1, 2], np.int64) * (c.replica_id_in_sync_group + 1)
    )
    # TF 2.21, two logical CPUs: s.reduce("SUM", (pr,), axis=-1) -> int64 [9];
    # s.reduce("SUM", [pr, pr], axis=0) -> int64 [6, 12]
    assert show(lambda: st.reduce("SUM", (pr,), axis=-1)) == "int64 [9]"
    assert show(lambda: st.reduce("SUM", [pr, pr], axis=0)) == "int64 [6, 12]"


def test_pack_errors_end_with_the_name_tf_converts_under() -> None:
    i32 = np.array(1, np.int32)
    two = "cannot compute Pack as input #1(zero-based) was expected to be a int32 tensor but is a "
    two += "int64 tensor [Op:Pack] name: "
    # TF 2.21: tf.Variable([i32, i64]) (with dtype=tf.int32 too) -> ... name: initial_value;
    # Dataset.from_tensors((1, [i32, i64])) and from_tensors({"b": [i32, i64], "a": 1}) ->
    # ... name: component_1 (dict keys flatten sorted); convert_to_tensor -> ... name: packed
    assert (
        show(lambda: mwms_mpi.Variable([i32, I64]))
        == f"ERR InvalidArgumentError: {two}initial_value"
    )
    shown = show(lambda: mwms_mpi.Variable([i32, I64], dtype=np.int32))
    assert shown == f"ERR InvalidArgumentError: {two}initial_value"
    shown = show(lambda: Dataset.from_tensors((1, [i32, I64])))
    assert shown == f"ERR InvalidArgumentError: {two}component_1"
    shown = show(lambda: Dataset.from_tensors({"b": [i32, I64], "a": 1}))
    assert shown == f"ERR InvalidArgumentError: {two}component_1"
    assert show(lambda: as_array([i32, I64])) == f"ERR InvalidArgumentError: {two}packed"


def test_a_namedtuple_holding_arrays_packs_to_a_requested_dtype() -> None:
    pair = collections.namedtuple("pair", "a b")
    # TF 2.21: tf.convert_to_tensor(pair(tf.constant(1, tf.int64), 2), dtype=tf.float32)
    # -> float32 [1.0, 2.0]; without a dtype -> int64 [1, 2]
    value = pair(np.array(1, np.int64), 2)
    assert show(lambda: convert_to_dtype(value, np.float32)) == "float32 [1.0, 2.0]"
    assert show(lambda: as_array(value)) == "int64 [1, 2]"
