"""Exact sums, serially, against the independent IEEE-754 reference (tests/support/ieee_reference).

The package's results come from its own code paths: ``local_exact_sum`` (a one-worker strategy's
replicas) and :func:`_over_ranks`, which runs ``ExactSum``'s steps for addends split over
simulated ranks with the collectives as numpy MAX and SUM over those ranks. The expected bits
never come from mwms_mpi: the reference decodes the bit patterns, sums exactly in integers, and
rounds once by IEEE-754's rules.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mwms_mpi.collective import exact
from mwms_mpi.collective.deterministic import local_exact_sum
from tests.support.ieee_reference import (
    FORMATS,
    grid_bits,
    known_deviations,
    reference_sum,
    same_values,
)

FLOATS = [np.float16, np.float32, np.float64]


def _over_ranks(ranks: Sequence[Sequence[np.ndarray]], divisor: int = 1) -> np.ndarray:
    """ExactSum's steps for every simulated rank's addends (real, flat, one size and dtype), the
    collectives being a MAX and a SUM over the ranks: what every world size must give."""
    dtype = ranks[0][0].dtype
    size = ranks[0][0].size
    plan = exact.ExactSum(dtype, size, sum(len(r) for r in ranks))
    exponents = []
    for local in ranks:
        e = np.empty(size + 1, dtype=plan.fmt.exponent_dtype)
        plan.exponents(local, e)
        exponents.append(e)
    agreed = np.maximum.reduce(exponents)
    fields, special = agreed[:-1], bool(agreed[-1])
    words = np.zeros(size * plan.words)
    for local in ranks:
        mine = np.empty(size * plan.words)
        plan.to_words(local, fields, special, mine)
        words += mine  # integers below 2**53: exact in any order
    lanes = np.maximum.reduce([plan.special_lanes(r) for r in ranks]) if special else None
    out = np.empty(size, dtype=dtype)
    plan.to_floats(words, fields, out, divisor, lanes)
    return out


def _reference(addends: Sequence[np.ndarray], divisor: int = 1) -> np.ndarray:
    """The IEEE reference with exact.py's documented grid for ``len(addends)`` addends (and the
    package's known deviations, each pinned by a strict xfail below)."""
    r = len(addends)
    deviations = known_deviations(addends[0].dtype, divisor, r)
    return reference_sum(addends, divisor, grid_addends=r, **deviations)


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
def addend_sets(draw: Any) -> tuple[list[list[np.ndarray]], int]:
    """(ranks, divisor): 1 to 4 ranks of 1 to 3 local addends of 5 elements, and a MEAN's
    divisor (1: a SUM). Some draws cancel half the addends exactly, some are signed zeros
    only, some lie far below their element's largest (where the grid rounds), and some get
    NaN, infinities and -0 at a few places."""
    dtype = np.dtype(draw(st.sampled_from(FLOATS)))
    span = {2: 8, 4: 40, 8: 100}[dtype.itemsize]  # wide enough for the grid to round addends
    mode = draw(st.sampled_from(["plain", "cancel", "zeros", "far"]))
    finite = st.one_of(
        st.sampled_from(_blocks(dtype)),
        st.builds(
            lambda m, e: m * 2.0**e, st.floats(-2, 2, allow_nan=False), st.integers(-span, span)
        ),
    )
    # "far": addends up to 60 binades (float32: 40) below 2, around where the grid rounds them,
    # and (3 or more addends) the first cancelled by the last, so that the sum is of the far
    far = st.builds(
        lambda m, k: m * 2.0**-k,
        st.floats(-2, 2, allow_nan=False, allow_subnormal=False),
        st.integers(0, {2: 20, 4: 40, 8: 60}[dtype.itemsize]),
    )
    element = {"zeros": st.sampled_from([0.0, -0.0]), "far": far}.get(mode, finite)
    shape = (draw(st.integers(1, 4)), draw(st.integers(1, 3)))  # ranks, local addends
    with np.errstate(over="ignore"):
        flat = [
            np.array(draw(st.lists(element, min_size=5, max_size=5)), dtype=dtype)
            for _ in range(shape[0] * shape[1])
        ]
        if mode == "cancel":  # x + (-x) = +0: the second half negates the first
            half = len(flat) // 2
            flat[len(flat) - half :] = [-a for a in flat[:half]]
        elif mode == "far" and len(flat) > 2:  # the largest cancels: the far ones are the sum
            flat[-1] = -flat[0]
        for i, j, value in draw(
            st.lists(
                st.tuples(
                    st.integers(0, len(flat) - 1),
                    st.integers(0, 4),
                    st.sampled_from([np.inf, -np.inf, np.nan, -0.0]),
                ),
                max_size=3,
            )
        ):
            flat[i][j] = value
    ranks = [flat[r * shape[1] : (r + 1) * shape[1]] for r in range(shape[0])]
    divisor = draw(st.sampled_from([1, 1, 2, 3, shape[0], len(flat), 12]))
    return ranks, divisor


def _check_against_reference(ranks: list[list[np.ndarray]], divisor: int) -> None:
    """The package's sum of ``ranks``' addends, over simulated ranks and in one process, has
    the reference's bits."""
    flat = [a for local in ranks for a in local]
    want = _reference(flat, divisor)
    got = _over_ranks(ranks, divisor)
    assert same_values(got, want), (flat, divisor, got, want)
    alone = local_exact_sum(flat, divisor)
    assert same_values(alone, want), (flat, divisor, alone, want)


@settings(max_examples=300)
@given(addend_sets())
def test_exact_sums_and_means_are_the_ieee_reference(case: Any) -> None:
    _check_against_reference(*case)


@st.composite
def near_the_grid(draw: Any) -> tuple[list[list[np.ndarray]], int]:
    """(ranks, divisor): a largest addend, its negation, and addends whose last bits lie just
    above and below the element's grid unit (where exact.py rounds them, once), of both signs:
    the cancelled pair leaves the far addends' sum, whose last place is finer than the grid."""
    dtype = np.dtype(draw(st.sampled_from([np.float32, np.float64])))
    count = draw(st.integers(3, 8))
    bits = grid_bits(FORMATS[dtype.name], count)
    precision = FORMATS[dtype.name].precision
    top = draw(st.integers(-20, 20))
    mantissa = st.floats(1, 2, exclude_max=True).map(lambda m: np.asarray(m, dtype=dtype))
    offsets = st.integers(bits - precision - 2, bits + 2)  # binades below 2**top
    columns = []
    for _ in range(4):
        largest = draw(mantissa) * 2.0 ** (top - 1)
        rest = [
            draw(mantissa) * 2.0 ** (top - 1 - draw(offsets)) * draw(st.sampled_from([1, -1]))
            for _ in range(count - 2)
        ]
        columns.append([largest, -largest, *rest])
    flat = [np.array(addend, dtype=dtype) for addend in zip(*columns, strict=True)]
    order = draw(st.permutations(range(count)))
    flat = [flat[i] for i in order]
    ranks = draw(st.integers(1, count))
    split = [flat[r::ranks] for r in range(ranks)]  # uneven local counts are fine serially
    return split, draw(st.sampled_from([1, 3, count]))


@settings(max_examples=200)
@given(near_the_grid())
def test_addends_at_the_grids_last_place_are_the_ieee_reference(case: Any) -> None:
    _check_against_reference(*case)


@settings(max_examples=100)
@given(addend_sets(), st.randoms(use_true_random=False))
def test_the_same_bits_for_any_split_and_order(case: Any, random: Any) -> None:
    ranks, divisor = case
    flat = [a for local in ranks for a in local]
    reference = _over_ranks(ranks, divisor)
    shuffled = list(flat)
    random.shuffle(shuffled)
    assert reference.tobytes() == _over_ranks([shuffled], divisor).tobytes()
    assert reference.tobytes() == _over_ranks([[a] for a in shuffled], divisor).tobytes()


def test_special_values_follow_the_rules() -> None:
    inf, nan = np.inf, np.nan
    rank0 = np.array([1, -0.0, -0.0, 5, inf, inf, nan, 1, 3e38], dtype=np.float32)
    rank1 = np.array([-1, -0.0, 0.0, -5, 1, -inf, 1, -inf, 3e38], dtype=np.float32)
    got = _over_ranks([[rank0], [rank1]])
    want = [0.0, -0.0, 0.0, 0.0, inf, nan, nan, -inf, inf]
    np.testing.assert_array_equal(got, np.array(want, dtype=np.float32))
    assert [math.copysign(1, x) for x in got[:4]] == [1, -1, 1, 1]  # -0 only when all are -0
    assert same_values(got, _reference([rank0, rank1]))


def test_cancellation_across_many_binades_is_exact_in_float64() -> None:
    a = np.array([2.0**60, 1.0, 3.0])
    b = np.array([-(2.0**60), 2.0**-30, 2.0**100])
    got = _over_ranks([[a], [b]])
    np.testing.assert_array_equal(got, [0.0, 1.0 + 2.0**-30, 2.0**100])


def test_an_addend_far_below_the_largest_is_rounded_onto_the_grid() -> None:
    # The documented departure from the exact sum (exact.py, step 2): with R = 3 the float32
    # grid below 2**top = 2 has P = 51 bits, so 2**-80 rounds to 0 and 1 + 2**-24 is a tie,
    # to 1.0; the exact sum, above the tie, would round up. The reference without its grid
    # says so too, so this test fails if either side stops modelling the grid.
    addends = [np.array([x], dtype=np.float32) for x in (1.0, 2.0**-24, 2.0**-80)]
    got = local_exact_sum(addends)
    assert got[0] == np.float32(1.0)
    assert same_values(got, _reference(addends))
    assert reference_sum(addends)[0] == np.float32(1 + 2**-23)


@pytest.mark.parametrize("dtype", FLOATS)
def test_a_mean_divides_the_exact_sum_once(dtype: Any) -> None:
    rng = np.random.default_rng(3)
    addends = [rng.standard_normal(64).astype(dtype) for _ in range(3)]
    for divisor in (3, 7):
        assert same_values(local_exact_sum(addends, divisor), _reference(addends, divisor))


@pytest.mark.parametrize(
    ("values", "divisor", "want_hex"),
    [
        # the exact sum / 3 is -0x1.68bbfe255d4e3...p+17, below the tie; round(sum) / 3 is above
        (
            ["-0x1.0e8cfe9bd45ccp+19", "0x1.d26f56326f7e6p-21", "-0x1.9b82bda84cc3ep-16"],
            3,
            "-0x1.68bbfe255d4e4p+17",
        ),
        # (max + max) / 2 is max; the sum, rounded to float64 first, overflows to inf (as TF's)
        (["0x1.fffffffffffffp+1023", "0x1.fffffffffffffp+1023"], 2, "inf"),
    ],
)
def test_a_float64_mean_divides_the_sum_rounded_to_float64(
    values: list[str], divisor: int, want_hex: str
) -> None:
    # Documented (exact.py step 3, README): float64 rounds the exact sum to float64, then a MEAN
    # divides it, as TF's sum-then-truediv MEAN does. The reference's model of that rule and the
    # literal result agree; the once-rounded quotient differs.
    addends = [np.array([float.fromhex(v)]) for v in values]
    got = local_exact_sum(addends, divisor)
    assert same_values(got, _reference(addends, divisor)), got[0].hex()
    assert got[0] == float.fromhex(want_hex), got[0].hex()
    once = reference_sum(addends, divisor, grid_addends=len(addends))
    assert not same_values(got, once)


def test_a_negative_float64_addend_is_rounded_onto_the_grid_once() -> None:
    # R = 2, largest 1.0: the grid unit is 2**-103 and x / unit = -(2**49 + 0.625), which rounds
    # once to -(2**49 + 1); 1 - (2**49 + 1) * 2**-103 is below the float64 tie 1 - 2**-54, so
    # the sum is 1 - 2**-53. Rounded twice (the low word split by floor), x / unit became
    # -2**49 and the sum the tie, 1.0.
    x = -(2.0**49 + 0.625) * 2.0**-103
    addends = [np.array([1.0]), np.array([x])]
    want = reference_sum(addends, grid_addends=2)
    assert want[0] == 1 - 2.0**-53 and reference_sum(addends)[0] == want[0]
    got = local_exact_sum(addends)
    assert same_values(got, want), (got[0].hex(), want[0].hex())


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
    one: np.ndarray = np.ones(4, dtype=dtype)
    between: np.ndarray = (np.array([0.5, 1.5, 2.5, 0.75]) * unit).astype(dtype)
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
