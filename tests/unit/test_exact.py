"""Exact sums, serially: correctly rounded, order-free, and the special values' rules."""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mwms_mpi.collective import exact
from tests.support.exact_reference import rational_sum, round_fraction, serial_exact

FLOATS = [np.float16, np.float32, np.float64]


def _blocks(dtype: Any) -> list[float]:
    """Values that stress a dtype: its extremes, subnormals, signed zeros, powers of two."""
    info = np.finfo(dtype)
    smallest = float(info.smallest_subnormal)
    return [
        0.0,
        -0.0,
        1.0,
        -1.0,
        float(info.max),
        -float(info.max),
        float(info.tiny),
        smallest,
        -smallest,
        3 * smallest,
        float(info.eps),
        2.0 ** (info.maxexp // 3),
        -(2.0 ** (info.maxexp // 3)),
        2.0 ** (info.minexp // 3),
    ]


@st.composite
def addend_sets(draw: Any, specials: bool = False) -> tuple[Any, list[list[np.ndarray]]]:
    """(dtype, ranks): addends split over 1 to 4 ranks, 1 to 3 local addends each, 5 elements."""
    dtype = np.dtype(draw(st.sampled_from(FLOATS)))
    span = {2: 8, 4: 40, 8: 100}[dtype.itemsize]
    element = st.one_of(
        st.sampled_from(_blocks(dtype)),
        st.builds(
            lambda m, e: m * 2.0**e,
            st.floats(-2, 2, allow_nan=False),
            st.integers(-span, span),
        ),
        *([st.sampled_from([np.inf, -np.inf, np.nan])] if specials else []),
    )
    ranks = draw(st.integers(1, 4))
    local = draw(st.integers(1, 3))
    with np.errstate(over="ignore"):
        return dtype, [
            [
                np.array(draw(st.lists(element, min_size=5, max_size=5)), dtype=dtype)
                for _ in range(local)
            ]
            for _ in range(ranks)
        ]


def _bits(a: np.ndarray) -> bytes:
    return np.ascontiguousarray(a).tobytes()


@settings(max_examples=300)
@given(addend_sets())
def test_exact_sums_are_the_rational_sum_rounded_once_or_within_the_grid_bound(case: Any) -> None:
    dtype, ranks = case
    flat = [a for local in ranks for a in local]
    got = serial_exact(ranks, dtype)
    fmt = exact.FORMATS[dtype]
    p = exact.precision_bits(len(flat))
    bits = p + (p if fmt.words == 2 else 0)
    want = rational_sum(flat, dtype)
    for j in range(got.size):
        if np.isnan(want[j]) or got[j] == want[j]:
            continue
        # only addends more than `bits - mantissa` binades below the element's largest are off
        # the grid; each is off by at most half a grid unit
        top = max((math.frexp(float(a[j]))[1] for a in flat if np.isfinite(a[j])), default=0)
        values = [Fraction(float(a[j])) for a in flat]
        error = abs(Fraction(float(got[j])) - sum(values, Fraction(0)))
        last_place = Fraction(float(np.spacing(np.abs(want[j]).astype(dtype))))
        assert error <= len(flat) * Fraction(2) ** (top - bits - 1) + last_place, (j, got, want)
        unit = Fraction(2) ** (top - bits)  # the grid's step: |addend| < 2**top
        off_grid = [v for v in values if (v / unit).denominator != 1]
        assert off_grid, f"element {j}: every addend was on the grid, yet {got[j]} != {want[j]}"


@settings(max_examples=200)
@given(addend_sets(specials=True), st.randoms(use_true_random=False))
def test_the_same_bits_for_any_split_and_order(case: Any, random: Any) -> None:
    dtype, ranks = case
    flat = [a for local in ranks for a in local]
    reference = serial_exact(ranks, dtype)
    shuffled = list(flat)
    random.shuffle(shuffled)
    assert _bits(serial_exact([shuffled], dtype)) == _bits(reference)
    assert _bits(serial_exact([[a] for a in shuffled], dtype)) == _bits(reference)


def test_special_values_follow_the_rules() -> None:
    inf, nan = np.inf, np.nan
    rank0 = np.array([1, -0.0, -0.0, 5, inf, inf, nan, 1, 3e38], dtype=np.float32)
    rank1 = np.array([-1, -0.0, 0.0, -5, 1, -inf, 1, -inf, 3e38], dtype=np.float32)
    got = serial_exact([[rank0], [rank1]], np.dtype(np.float32))
    want = [0.0, -0.0, 0.0, 0.0, inf, nan, nan, -inf, inf]
    np.testing.assert_array_equal(got, np.array(want, dtype=np.float32))
    assert [math.copysign(1, x) for x in got[:4]] == [1, -1, 1, 1]  # -0 only when all are -0


def test_cancellation_across_many_binades_is_exact_in_float64() -> None:
    a = np.array([2.0**60, 1.0, 3.0])
    b = np.array([-(2.0**60), 2.0**-30, 2.0**100])
    got = serial_exact([[a], [b]], np.dtype(np.float64))
    np.testing.assert_array_equal(got, [0.0, 1.0 + 2.0**-30, 2.0**100])


def test_a_mean_divides_the_exact_sum_once() -> None:
    rng = np.random.default_rng(3)
    addends = [rng.standard_normal(64).astype(np.float32) for _ in range(4)]
    got = serial_exact([addends], np.dtype(np.float32), divisor=4)
    np.testing.assert_array_equal(got, rational_sum(addends, np.dtype(np.float32), divisor=4))


def test_round_fraction_is_a_correct_reference() -> None:
    assert round_fraction(Fraction(1) + Fraction(1, 2**24), np.dtype(np.float32)) == 1.0  # tie
    assert round_fraction(Fraction(3, 2**150), np.dtype(np.float32)) == 2.0**-148  # subnormal
    assert math.isinf(round_fraction(Fraction(2**128), np.dtype(np.float32)))


def test_too_many_addends_are_refused() -> None:
    with pytest.raises(ValueError, match="addends per element"):
        exact.precision_bits(exact.MAX_ADDENDS + 1)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("together", [False, True])
def test_an_addend_between_grid_points_is_rounded_half_to_even_once(
    dtype: type, together: bool
) -> None:
    # The element's largest addend is 1.0, so its grid unit is u = 2**(bias - shift) (float64:
    # the low word's unit). Addends of 0.5u, 1.5u, 2.5u and 0.75u lie between grid points and
    # become 0, 2, 2 and 1 units: half to even, once (truncation or rounding twice would not).
    # Alone (the single-addend path; float32 in float32) or beside the 1.0 of the same rank.
    plan = exact.ExactSum(dtype, 4, 2)
    unit = 2.0 ** (plan.fmt.bias - plan.shift)
    one = np.ones(4, dtype=dtype)
    between = (np.array([0.5, 1.5, 2.5, 0.75]) * unit).astype(dtype)
    assert (between.astype(np.float64) == np.array([0.5, 1.5, 2.5, 0.75]) * unit).all()
    fields = np.empty(5, dtype=plan.fmt.exponent_dtype)
    plan.exponents([one, between], fields)
    words = np.empty(4 * plan.words)
    plan.to_words([one, between] if together else [between], fields[:4], False, words)
    rounded = np.array([0.0, 2.0, 2.0, 1.0])
    one_on_grid = 2.0 ** (plan.shift - plan.fmt.bias) if together else 0.0  # in units u
    if plan.low:  # float64: a high and a low word; 1.0 is all high, the rest all low
        assert (words[4:] == rounded).all(), words
        assert (words[:4] == one_on_grid / 2.0**plan.low).all(), words
    else:
        assert (words == rounded + one_on_grid).all(), words
