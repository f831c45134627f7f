"""``Module``'s variable order and names, and ``Variable``'s operators, pinned against TF 2.21.

Every expected value and message below was printed by TensorFlow 2.21 (``/tmp/tfvenv``)
running the same program with ``tf.Module``/``tf.Variable`` (audit scripts f01-f16); the TF
rule each test pins is named in its docstring. No MPI is initialised here.
"""

from __future__ import annotations

import collections
import re
from typing import Any

import numpy as np
import pytest

import mwms_mpi
from mwms_mpi import errors

V = mwms_mpi.Variable


def _names(variables: Any) -> list[str]:
    return [v.name for v in variables]


# -- Module: _flatten_module order ---------------------------------------------------------------


class _Sub(mwms_mpi.Module):
    def __init__(self) -> None:
        super().__init__()
        self.x = V(0.0, name="x")


class _Leaf(mwms_mpi.Module):
    def __init__(self, n: str) -> None:
        super().__init__()
        self.w = V(0.0, name=n + "w")
        self.z = V(0.0, name=n + "z", trainable=False)


def test_module_leaves_before_submodules() -> None:
    """TF's ``_flatten_module``: a module's own leaves (all attributes, sorted) come before the
    leaves of its submodules. TF: ['b:0', 'x:0']."""

    class M(mwms_mpi.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a = _Sub()
            self.b = V(0.0, name="b")

    assert _names(M().variables) == ["b:0", "x:0"]


def test_module_order_through_nests_and_shared_objects() -> None:
    """Leaves are flattened with tf.nest's rules (dict keys sorted, namedtuples by field);
    submodules are walked in the order they were found, each object once. TF printed
    variables ['bv:0', 'bx:0', 'c:0', 'q:0', 'aw:0', 'az:0', 'b0w:0', 'b0z:0', 'byw:0',
    'byz:0', 'pw:0', 'pz:0'], trainable ['bv:0', 'bx:0', 'c:0', 'q:0', 'aw:0', 'b0w:0',
    'byw:0', 'pw:0']."""
    nt = collections.namedtuple("nt", "q p")

    class T(mwms_mpi.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a = _Leaf("a")
            self.b = [_Leaf("b0"), V(0.0, name="bv"), {"y": _Leaf("by"), "x": V(0.0, name="bx")}]
            self.c = V(0.0, name="c")
            self.nt = nt(V(0.0, name="q"), _Leaf("p"))
            self.a2 = self.a
            self.self_ref = self
            self.cv = self.c

    t = T()
    assert _names(t.variables) == [
        "bv:0", "bx:0", "c:0", "q:0", "aw:0", "az:0", "b0w:0", "b0z:0", "byw:0", "byz:0",
        "pw:0", "pz:0",
    ]  # fmt: skip
    assert _names(t.trainable_variables) == [
        "bv:0", "bx:0", "c:0", "q:0", "aw:0", "b0w:0", "byw:0", "pw:0",
    ]  # fmt: skip


def test_module_dict_keys_sorted_by_value_not_repr() -> None:
    """tf.nest sorts dict keys themselves. TF: ['k2:0', 'k9:0', 'k10:0'] and
    ['a:0', 'anl:0', 'a0:0', 'zq:0']."""

    class M(mwms_mpi.Module):
        def __init__(self) -> None:
            super().__init__()
            self.d = {10: V(0.0, name="k10"), 9: V(0.0, name="k9"), 2: V(0.0, name="k2")}

    class S(mwms_mpi.Module):
        def __init__(self) -> None:
            super().__init__()
            self.d = {
                "z'": V(0.0, name="zq"),
                "a": V(0.0, name="a"),
                "a\n": V(0.0, name="anl"),
                "a0": V(0.0, name="a0"),
            }

    assert _names(M().variables) == ["k2:0", "k9:0", "k10:0"]
    assert _names(S().variables) == ["a:0", "anl:0", "a0:0", "zq:0"]


def test_module_dict_with_unsortable_keys() -> None:
    """TF: ValueError "Error processing property 'd' of DictWrapper({1: <tf.Variable ...>,
    'a': ...})" from TypeError "'<' not supported between instances of 'str' and 'int'";
    "Error processing property 'l' of ListWrapper([DictWrapper({1: 1, 'a': 2})])";
    "Error processing property 't' of _TupleWrapper((DictWrapper({1: 1, 'a': 2}),))"."""

    class M(mwms_mpi.Module):
        def __init__(self) -> None:
            super().__init__()
            self.d = {1: V(0.0), "a": V(1.0)}

    with pytest.raises(
        ValueError, match=r"^Error processing property 'd' of DictWrapper\(\{1: <"
    ) as e:
        M().variables  # noqa: B018
    assert isinstance(e.value.__cause__, TypeError)
    m = mwms_mpi.Module()
    m.l = [{1: 1, "a": 2}]
    with pytest.raises(ValueError) as e:
        m.variables  # noqa: B018
    assert (
        str(e.value)
        == "Error processing property 'l' of ListWrapper([DictWrapper({1: 1, 'a': 2})])"
    )
    m = mwms_mpi.Module()
    m.t = ({1: 1, "a": 2},)
    with pytest.raises(ValueError) as e:
        m.trainable_variables  # noqa: B018
    assert str(e.value) == (
        "Error processing property 't' of _TupleWrapper((DictWrapper({1: 1, 'a': 2}),))"
    )


# -- Module: names -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("cls", "name"),
    [
        ("A_B", "a_b"), ("ABCDef", "abc_def"), ("HTTPServer", "http_server"), ("a", "a"),
        ("Foo2Bar", "foo2_bar"), ("My__Mod", "my___mod"), ("_Priv", "__priv"), ("X1Y", "x1_y"),
        ("ABC", "abc"),
    ],
)  # fmt: skip
def test_module_default_name_is_tf_camel_to_snake(cls: str, name: str) -> None:
    """TF's ``camel_to_snake``: ``_`` before an upper-case letter after a lower-case letter or
    digit, or before one followed by a lower-case letter (never at the start). TF's output
    is each pair above."""
    assert type(cls, (mwms_mpi.Module,), {})().name == name


@pytest.mark.parametrize("bad", ["", "1abc", "a b", "a/b", "a.b", "é"])
def test_module_invalid_name(bad: str) -> None:
    """TF: ValueError "'a b' is not a valid module name. Module names must be valid Python
    identifiers (e.g. a valid class name)." (regex ``^[a-zA-Z_]([a-zA-Z0-9_])*$``)."""
    message = (
        f"{bad!r} is not a valid module name. Module names must be valid Python identifiers "
        "(e.g. a valid class name)."
    )
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        mwms_mpi.Module(name=bad)
    assert mwms_mpi.Module(name="_x").name == "_x"


# -- Variable operators: operand conversion -------------------------------------------------------


def _invalid(op: str, x: str, y: str) -> str:
    return (
        f"cannot compute {op} as input #1(zero-based) was expected to be a {x} tensor but is a "
        f"{y} tensor [Op:{op}] name: "
    )


def test_operand_converted_to_variable_dtype() -> None:
    """TF converts the other operand with ``convert_to_tensor(y, dtype=x.dtype)``: numpy values
    are cast, Python ints wrap. TF: float32 float32 float32 float32; int32 [8, -5]; [6] and
    [49] (``2**40`` is int32 0, ``300`` uint8 44)."""
    vf = V([1.5, -2.0])
    m = V([[1.0, 2.0], [3.0, 4.0]])
    assert (vf + np.float64(1.0)).dtype == np.float32
    assert (vf + [1, 2]).dtype == np.float32  # noqa: RUF005
    assert (vf * np.array([2.0, 2.0])).dtype == np.float32
    assert (m @ [[1.0], [1.0]]).dtype == np.float32
    assert (np.float64(1) + vf).dtype == np.float32  # TF: float32 [2.5, -1.0]
    assert (np.array([2.0, 2.0]) * vf).dtype == np.float32
    r = V([6, -7]) + np.array([2.5, 2.0])
    assert r.dtype == np.int32 and r.tolist() == [8, -5]
    assert (V([6]) + 2**40).tolist() == [6]
    assert (V(np.array([5], dtype=np.uint8)) + 300).tolist() == [49]
    assert (2**40 + V([6])).tolist() == [6]


def test_operand_of_other_dtype_refused() -> None:
    """A variable of another dtype: InvalidArgumentError (TruedDiv: TypeError); a Python float
    with an integer variable: TF's conversion TypeError, but InvalidArgumentError for the
    forward ``+``. Messages are TF's."""
    vf, vi = V([1.5, -2.0]), V([6, -7])
    with pytest.raises(
        errors.InvalidArgumentError, match=re.escape(_invalid("AddV2", "float", "int32"))
    ):
        vf + vi
    with pytest.raises(
        errors.InvalidArgumentError, match=re.escape(_invalid("Sub", "int32", "double"))
    ):
        vi - V(np.array([1.0, 2.0]))
    with pytest.raises(
        errors.InvalidArgumentError, match=re.escape(_invalid("Less", "int32", "float"))
    ):
        _ = vi < vf
    with pytest.raises(
        errors.InvalidArgumentError, match=re.escape(_invalid("AddV2", "int32", "float"))
    ):
        vi + 1.5
    with pytest.raises(TypeError, match=r"^Cannot convert 1\.5 to EagerTensor of dtype int32$"):
        1.5 + vi
    with pytest.raises(
        TypeError, match=r"^Cannot convert \[1\.5, 2\.0\] to EagerTensor of dtype int32$"
    ):
        vi * [1.5, 2.0]
    same = "`x` and `y` must have the same dtype, got tf.int32 != tf.{}."
    with pytest.raises(TypeError, match=f"^{re.escape(same.format('float32'))}$"):
        vi / 1.5
    with pytest.raises(TypeError, match=f"^{re.escape(same.format('int64'))}$"):
        vi / V(np.array([1, 2]))
    with pytest.raises(ValueError, match=r"^Attempt to convert a value \(None\)"):
        vi == None  # noqa: B015, E711


def test_true_division_dtypes() -> None:
    """TF's ``_TRUEDIV_TABLE`` (``convert.truediv_dtype``). TF: float32 float32; int32 / 2 is
    float64; int16 / np.float64(2) float32 [3.]."""
    i16 = np.array([6, 5], dtype=np.int16)
    assert (V(i16) / V(np.array([4, 5], dtype=np.int16))).dtype == np.float32
    assert (V(np.array([250], dtype=np.uint8)) / 2).dtype == np.float32
    assert (V([6, -7]) / 2).dtype == np.float64
    r = V(np.array([6], dtype=np.int16)) / np.float64(2)
    assert r.dtype == np.float32 and r.tolist() == [3.0]
    assert (V([1.5]) / np.float64(2)).dtype == np.float32


# -- Variable operators: bitwise, mod, integer division --------------------------------------------


def test_bitwise_operators_on_integers() -> None:
    """TF: ``&|^`` are BitwiseAnd/Or/Xor on integers, logical on bool, refused on floats.
    TF: [2 1 1] [ 7  7 -5] [ 5  6 -6]; ~ -> [-7, 6, -1]."""
    v = V([6, 5, -7])
    assert (v & 3).tolist() == [2, 1, 1]
    assert (v | 3).tolist() == [7, 7, -5]
    assert (v ^ 3).tolist() == [5, 6, -6]
    assert (3 & v).tolist() == [2, 1, 1]
    assert (~V([6, -7, 0])).tolist() == [-7, 6, -1]
    b = V([True, False])
    assert (b & True).tolist() == [True, False] and (b ^ True).tolist() == [False, True]
    assert (~b).tolist() == [False, True]
    allowed = "int8, int16, int32, int64, uint8, uint16, uint32, uint64"
    with pytest.raises(
        errors.InvalidArgumentError,
        match="^"
        + re.escape(f"Value for attr 'T' of float is not in the list of allowed values: {allowed}"),
    ):
        V([1.5]) & 2
    with pytest.raises(errors.InvalidArgumentError, match=r"^Value for attr 'T' of double "):
        V(np.array([1.5])) | 2
    with pytest.raises(errors.InvalidArgumentError, match="of float is not in the list"):
        ~V([1.5])


def test_float_mod_keeps_tf_signed_zero() -> None:
    """TF's FloorMod: ``fmod``, then ``+ y`` when the signs differ and the result is non-zero.
    TF: [-0. -0.  1.  1.  0.  1.]; % -2.0: [-0.  0. -1. -1. -0.]; % 0.0: [nan nan]."""
    r = V([-2.0, -4.0, 3.0, -3.0, 0.0, 5.0]) % 2
    assert r.dtype == np.float32 and r.tolist() == [0.0, 0.0, 1.0, 1.0, 0.0, 1.0]
    assert np.signbit(r).tolist() == [True, True, False, False, False, False]
    r = V([-2.0, 2.0, 3.0, -3.0, -0.0]) % -2.0
    assert r.tolist() == [0.0, 0.0, -1.0, -1.0, 0.0]
    assert np.signbit(r).tolist() == [True, False, True, True, True]
    with np.errstate(invalid="ignore"):
        assert np.isnan(V([1.0, -1.0]) % 0.0).all()
    assert (V([5, -5]) % -3).tolist() == [-1, -2]


def test_integer_division_by_zero() -> None:
    """TF: InvalidArgumentError '{{function_node __wrapped__FloorDiv_device_/job:localhost/
    replica:0/task:0/device:CPU:0}} Integer division by zero [Op:FloorDiv] name: ' (and
    FloorMod), reflected too."""
    head = "{{function_node __wrapped__%s_device_/job:localhost/replica:0/task:0/device:CPU:0}} "
    cases = [
        (lambda: V([5]) // 0, "FloorDiv"),
        (lambda: V([5]) % 0, "FloorMod"),
        (lambda: 5 // V([6, 0]), "FloorDiv"),
        (lambda: 5 % V([6, 0]), "FloorMod"),
    ]
    for fn, op in cases:
        with pytest.raises(errors.InvalidArgumentError) as e:
            fn()
        assert str(e.value) == head % op + f"Integer division by zero [Op:{op}] name: "


# -- Variable: iteration, assignment dtype, constraint ---------------------------------------------


def test_scalar_variable_is_not_iterable() -> None:
    """TF: TypeError 'Cannot iterate over a scalar tensor.'; a vector iterates its rows."""
    with pytest.raises(TypeError, match=r"^Cannot iterate over a scalar tensor\.$"):
        list(V(1.0))
    assert [x.tolist() for x in V([1, 2])] == [1, 2]


def test_assign_variable_of_other_dtype_refused() -> None:
    """TF: ValueError 'Incompatible type conversion requested to type float32 for `tf.Variable
    of type float64. (Variable: <tf.Variable ...>)'."""
    v, w = V([1.0]), V(np.array([2.5]))
    message = "Incompatible type conversion requested to type {} for `tf.Variable of type {}."
    with pytest.raises(ValueError, match=f"^{re.escape(message.format('float32', 'float64'))} "):
        v.assign(w)
    assert v.numpy().tolist() == [1.0]
    with pytest.raises(ValueError, match=f"^{re.escape(message.format('int64', 'int32'))} "):
        V(np.array([1])).assign_add(V([2]))


def test_constraint_must_be_callable() -> None:
    """TF: ValueError "Argument `constraint` must be None or a callable. a callable. Got a
    <class 'int'>:  3" (sic, two spaces)."""
    message = "Argument `constraint` must be None or a callable. a callable. Got a "
    message += "<class 'int'>:  3"
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        V(1.0, constraint=3)
    assert V(1.0, constraint=None).constraint is None
