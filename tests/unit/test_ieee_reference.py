"""The IEEE-754 reference itself: known values, every float16, and float64's ``float(Fraction)``.

The deterministic-sum tests trust ``tests/support/ieee_reference.py``; these tests are why:
hand-worked roundings (ties, subnormals, overflow, a double-rounding trap), an exhaustive
float16 decode, and hypothesis against the two correctly rounded conversions Python and numpy
have: ``float(Fraction)`` (float64) and numpy's cast of a float64 to float32 or float16 (one
rounding of a value float64 holds exactly).
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support import ieee_reference as ieee

F16, F32, F64 = ieee.FORMATS["float16"], ieee.FORMATS["float32"], ieee.FORMATS["float64"]


def _bits(x: float, dtype: str) -> int:
    """What numpy stores for ``x`` (exactly representable in ``dtype`` in these tests)."""
    return int(np.array([x], dtype=dtype).view(ieee.UINTS[dtype])[0])


@pytest.mark.parametrize(
    ("value", "fmt", "want"),
    [
        (Fraction(1) + Fraction(1, 2**24), F32, 0x3F800000),  # a tie: to the even 1.0
        (Fraction(1) + Fraction(3, 2**24), F32, 0x3F800002),  # a tie: to the even 1 + 2**-22
        (Fraction(1) + Fraction(1, 2**24) + Fraction(1, 2**60), F32, 0x3F800001),  # above it
        (Fraction(1, 3), F32, 0x3EAAAAAB),
        (Fraction(3, 2**150), F32, 0x00000002),  # 1.5 subnormal quanta: a tie, to 2
        (Fraction(1, 2**150), F32, 0x00000000),  # half the smallest subnormal: a tie, to 0
        (-Fraction(1, 2**151), F32, 0x80000000),  # underflow keeps the sign
        (Fraction(2**24 - 1, 2**150), F32, 0x00800000),  # a subnormal tie up to 2**-126
        (Fraction(2**128), F32, 0x7F800000),
        (Fraction(65504), F16, 0x7BFF),  # float16's largest
        (Fraction(65519), F16, 0x7BFF),  # below max + half an ulp (65520)
        (Fraction(65520), F16, 0x7C00),  # max + half an ulp: a tie to 2**16, beyond: inf
        (-Fraction(65520), F16, 0xFC00),
        (Fraction(1, 2**24), F16, 0x0001),  # the smallest subnormal
        (Fraction(3, 2**26), F16, 0x0001),  # 0.75 quanta
        (Fraction(1, 2**25), F16, 0x0000),  # 0.5 quanta: a tie, to 0
        (Fraction(2**-14), F16, 0x0400),  # the smallest normal
        (Fraction(2049), F16, 0x6800),  # 2048 + 1: a tie at a 2-unit spacing, to 2048
        (Fraction(2051), F16, 0x6802),  # 2048 + 3: a tie, to 2052
        (Fraction(1, 10), F64, 0x3FB999999999999A),
        (Fraction(2**1024 - 2**970), F64, 0x7FF0000000000000),  # max + half an ulp: overflow
        (Fraction(2**1024 - 2**970 - 1), F64, 0x7FEFFFFFFFFFFFFF),
        (Fraction(1, 2**1075), F64, 0x0000000000000000),
        (Fraction(3, 2**1076), F64, 0x0000000000000001),
    ],
)
def test_known_roundings(value: Fraction, fmt: ieee.Binary, want: int) -> None:
    assert ieee.round_fraction(value, fmt) == want


def test_float32_via_a_float64_would_round_twice_and_the_reference_does_not() -> None:
    value = Fraction(1) + Fraction(1, 2**24) + Fraction(1, 2**60)
    twice = int(np.float32(float(value)).view(np.uint32))  # float64 lands on the tie: 1.0
    assert twice == 0x3F800000
    assert ieee.round_fraction(value, F32) == 0x3F800001  # the tie is below the value


def test_every_float16_decodes_to_its_value_and_rounds_back_to_itself() -> None:
    patterns = np.arange(1 << 16, dtype=np.uint16)
    values = patterns.view(np.float16).astype(np.float64).tolist()
    for bits, value in zip(patterns.tolist(), values, strict=True):
        d = ieee.decode(bits, F16)
        if math.isnan(value):
            assert d.kind == "nan"
        elif math.isinf(value):
            assert d.kind == "inf" and d.negative == (value < 0)
        else:
            assert d.kind == "finite" and d.fraction() == Fraction(value)
            assert d.negative == (math.copysign(1.0, value) < 0)
            if value:
                assert ieee.round_fraction(d.fraction(), F16) == bits


rationals = st.builds(
    lambda n, d, e: Fraction(n, d) * Fraction(2) ** e,
    st.integers(-(2**80), 2**80).filter(bool),
    st.integers(1, 2**70),
    st.integers(-1200, 1100),
)


@settings(max_examples=500)
@given(rationals)
def test_float64_matches_pythons_correctly_rounded_float_of_a_fraction(value: Fraction) -> None:
    try:
        want = float(value)
    except OverflowError:  # beyond float64's range after rounding: an infinity
        want = math.inf if value > 0 else -math.inf
    zero = 0.0 if value > 0 else -0.0  # float(Fraction) of an underflow may lose the sign
    got = ieee.round_fraction(value, F64)
    assert got == _bits(zero if want == 0 else want, "float64")


@settings(max_examples=500)
@given(st.sampled_from(["float16", "float32"]), st.floats(allow_nan=False, allow_infinity=False))
def test_narrow_formats_match_numpys_one_rounding_of_a_float64(dtype: str, x: float) -> None:
    if x == 0:
        return
    with np.errstate(over="ignore"):
        want = int(np.array([x]).astype(dtype).view(ieee.UINTS[dtype])[0])
    assert ieee.round_fraction(Fraction(x), ieee.FORMATS[dtype]) == want


def _sum(values: list[float], dtype: str, divisor: int = 1, grid: int | None = None) -> Any:
    bits = ieee.bit_patterns(np.array(values, dtype=dtype))
    out = ieee.exact_sum(bits, ieee.FORMATS[dtype], divisor, grid)
    return ieee.from_bits([out], dtype)[0]


def test_special_values_and_signed_zeros_follow_ieee_754() -> None:
    inf, nan = math.inf, math.nan
    assert math.isnan(_sum([1.0, nan], "float32"))
    assert math.isnan(_sum([inf, -inf, 1.0], "float32"))
    assert _sum([inf, 3e38, 3e38], "float32") == inf
    assert _sum([-inf, 1.0], "float16") == -inf
    assert math.copysign(1, _sum([-0.0, -0.0, -0.0], "float64")) == -1
    assert math.copysign(1, _sum([-0.0, 0.0], "float64")) == 1
    assert math.copysign(1, _sum([1.5, -1.5], "float32")) == 1  # x + (-x) = +0
    assert math.copysign(1, _sum([-0.0, 1.5, -1.5], "float32")) == 1
    assert math.copysign(1, _sum([-0.0, -0.0], "float16", divisor=3)) == -1
    smallest = float(np.finfo(np.float16).smallest_subnormal)
    assert math.copysign(1, _sum([-smallest, -0.0, 0.0], "float16", divisor=3)) == -1  # underflow


def test_overflow_happens_at_the_one_rounding() -> None:
    big = float(np.finfo(np.float32).max)
    assert _sum([big, big], "float32") == math.inf
    assert _sum([big, big, -big], "float32") == big  # no overflow in between: exact
    assert _sum([big, big], "float32", divisor=2) == big
    assert _sum([-65504.0, -16.0], "float16") == -math.inf  # 65520: the tie, beyond the largest
    assert _sum([65504.0, 15.0], "float16") == 65504.0


@settings(max_examples=300)
@given(st.lists(st.floats(allow_nan=False, allow_infinity=False, width=64), min_size=1, max_size=8))
def test_float64_sums_match_math_fsum(values: list[float]) -> None:
    try:
        want = math.fsum(values)  # the exact sum, rounded once
    except OverflowError:
        return
    got = _sum(values, "float64")
    if want == 0:  # fsum's zero sign is its own; the reference's is tested above
        assert got == 0
    else:
        assert got.tobytes() == np.float64(want).tobytes()


def test_the_grid_rounds_addends_far_below_the_largest() -> None:
    # R = 3: P = 51 bits below 2**top = 2. 2**-80 is below the grid unit 2**-50: it rounds to 0,
    # leaving 1 + 2**-24, a tie in float32 (to 1.0); the exact sum is above the tie.
    values = [1.0, 2.0**-24, 2.0**-80]
    assert _sum(values, "float32") == np.float32(1 + 2**-23)
    assert _sum(values, "float32", grid=3) == np.float32(1)
    assert ieee.grid_bits(F32, 3) == 51 and ieee.grid_bits(F64, 3) == 102


@settings(max_examples=200)
@given(
    st.sampled_from(["float32", "float64"]),
    st.lists(st.floats(1, 2, exclude_max=True), min_size=1, max_size=6),
    st.lists(st.integers(-20, 4), min_size=6, max_size=6),
    st.lists(st.booleans(), min_size=6, max_size=6),
)
def test_the_grid_moves_nothing_within_its_exact_span(
    dtype: str, mantissas: list[float], exponents: list[int], signs: list[bool]
) -> None:
    # exact.py: an addend is exact on the grid unless it lies more than B - precision binades
    # below the element's largest; these lie at most 24 binades apart (B - p >= 27 for R <= 6)
    values = [
        -m * 2.0**e if negative else m * 2.0**e
        for m, e, negative in zip(mantissas, exponents, signs, strict=False)
    ]
    assert _sum(values, dtype, grid=len(values)).tobytes() == _sum(values, dtype).tobytes()


def test_same_values_matches_nan_to_nan_and_nothing_else() -> None:
    a = np.array([np.nan, 0.0, 1.0], dtype=np.float32)
    other_nan = np.array([0x7FC00001], dtype=np.uint32).view(np.float32)[0]
    assert ieee.same_values(a, np.array([other_nan, 0.0, 1.0], dtype=np.float32))
    assert not ieee.same_values(a, np.array([np.nan, -0.0, 1.0], dtype=np.float32))
    assert not ieee.same_values(a, a.astype(np.float64))
    c = np.array([complex(1, np.nan)], dtype=np.complex64)
    assert ieee.same_values(c, c.copy())
    assert not ieee.same_values(c, np.array([complex(1, 0)], dtype=np.complex64))
