"""An IEEE-754 reference for exact sums, from the standard alone: it imports nothing from mwms_mpi.

What the tests compare mwms_mpi's deterministic reductions with (docs/architecture.md,
"Deterministic reductions"; ``mwms_mpi/collective/exact.py``). Everything is integer arithmetic
on the formats' bit patterns, so nothing here rounds except :func:`round_rational`:

- :func:`decode` reads a binary16/32/64 bit pattern (sign, biased exponent, fraction) as NaN,
  an infinity, or an exact value ``m * 2**e``; :func:`round_rational` rounds any rational
  ``p / q`` once, to nearest with ties to even, into a format's bit pattern: subnormals by the
  fixed quantum below ``2**emin``, a nonzero value too small for the smallest subnormal to a zero
  of its own sign, and a value whose rounding (with an unbounded exponent) exceeds the largest
  finite number to an infinity. ``float(Fraction)`` is correctly rounded only for float64; a
  float16 or float32 from it would be rounded twice, so it is not used.
- :func:`exact_sum` is one element's result by the IEEE-754 rules for an exact sum: any NaN, or
  +inf with -inf, gives NaN; else an infinity gives that infinity; else the exact sum of the
  finite addends (divided by ``divisor`` for a MEAN) rounded once; an exact zero is -0 only when
  every addend is -0 (``x + (-x)`` is +0 in round-to-nearest), and a nonzero quotient that
  underflows keeps its sign.
- The one documented departure from the exact sum (exact.py, step 2): with ``grid_addends=R``,
  each finite addend is first rounded half to even onto its element's grid ``2**(top - B)``,
  where ``2**(top-1) <= max|x| < 2**top`` (``top = emin + 1`` when the largest is subnormal or
  zero), ``B = P`` bits for float16/float32 and ``2P`` for float64, ``P = 53 - ceil(log2 R)``.
  Only addends more than ``B - precision`` binades below the element's largest move.
- :func:`reference_divide` is IEEE division of a format's values by a positive integer, rounded
  once (TF's ``truediv`` of a sum by a count).

:func:`known_deviations` names what mwms_mpi does today that its docs do not promise (bugs, each
pinned by a strict xfail in tests/unit/test_exact.py); the tests model them through
:func:`exact_sum`'s keyword arguments while the flags below say they are there, so the rest of a
test still compares every other bit. A fix turns its xfail into a failure (strict): then set its
flag False.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np


@dataclass(frozen=True)
class Binary:
    """An IEEE-754 binary interchange format."""

    precision: int  # p: significand bits, the implicit leading bit included
    exponent_bits: int  # w

    @property
    def bias(self) -> int:
        return (1 << (self.exponent_bits - 1)) - 1

    @property
    def emin(self) -> int:
        return 1 - self.bias

    @property
    def emax(self) -> int:
        return self.bias

    @property
    def quantum_min(self) -> int:
        """The exponent of the smallest subnormal's unit: ``emin - (p - 1)``."""
        return self.emin - (self.precision - 1)

    @property
    def sign_bit(self) -> int:
        return 1 << (self.precision - 1 + self.exponent_bits)

    @property
    def infinity(self) -> int:
        return ((1 << self.exponent_bits) - 1) << (self.precision - 1)

    @property
    def quiet_nan(self) -> int:
        return self.infinity | (1 << (self.precision - 2))


FORMATS: dict[str, Binary] = {
    "float16": Binary(11, 5),
    "float32": Binary(24, 8),
    "float64": Binary(53, 11),
}
UINTS = {"float16": np.uint16, "float32": np.uint32, "float64": np.uint64}


@dataclass(frozen=True)
class Datum:
    """One decoded value: ``kind`` is "nan", "inf" or "finite"; a finite one is
    ``(-1)**negative * mantissa * 2**exponent`` (a zero keeps its sign in ``negative``)."""

    kind: str
    negative: bool
    mantissa: int = 0
    exponent: int = 0

    @property
    def signed_mantissa(self) -> int:
        return -self.mantissa if self.negative else self.mantissa

    @property
    def is_negative_zero(self) -> bool:
        return self.kind == "finite" and self.mantissa == 0 and self.negative

    def fraction(self) -> Fraction:
        return Fraction(self.signed_mantissa) * Fraction(2) ** self.exponent


def decode(bits: int, fmt: Binary) -> Datum:
    """A bit pattern of ``fmt`` as NaN, an infinity or an exact value."""
    fraction_bits = fmt.precision - 1
    negative = bool(bits & fmt.sign_bit)
    biased = (bits >> fraction_bits) & ((1 << fmt.exponent_bits) - 1)
    fraction = bits & ((1 << fraction_bits) - 1)
    if biased == (1 << fmt.exponent_bits) - 1:
        return Datum("nan" if fraction else "inf", negative)
    if biased == 0:  # zero or subnormal: no implicit bit, the fixed quantum
        return Datum("finite", negative, fraction, fmt.quantum_min)
    return Datum(
        "finite", negative, fraction | (1 << fraction_bits), biased - fmt.bias - fraction_bits
    )


def _half_even(numerator: int, denominator: int) -> int:
    """``numerator / denominator`` (``denominator > 0``) rounded to the nearest integer, ties to
    even."""
    whole, rest = divmod(numerator, denominator)  # floor: 0 <= rest < denominator
    twice = 2 * rest
    if twice > denominator or (twice == denominator and whole % 2 == 1):
        whole += 1
    return whole


def round_rational(p: int, q: int, fmt: Binary) -> int:
    """``p / q`` (``q > 0``, ``p != 0``) rounded once to nearest even: a bit pattern of ``fmt``."""
    if q <= 0 or p == 0:
        raise ValueError(f"round_rational takes q > 0 and p != 0, not {p}/{q}")
    sign = fmt.sign_bit if p < 0 else 0
    a = abs(p)
    # e: 2**e <= a / q < 2**(e + 1)
    e = a.bit_length() - q.bit_length()
    if (a << max(-e, 0)) < (q << max(e, 0)):
        e -= 1
    quantum = max(e, fmt.emin) - (fmt.precision - 1)  # the exponent of the last place
    m = _half_even(a << max(-quantum, 0), q << max(quantum, 0))
    if m == 0:  # below half the smallest subnormal (or a tie with zero): a zero of its sign
        return sign
    if m.bit_length() > fmt.precision:  # rounded up to the next binade: 2**p exactly
        m >>= 1
        quantum += 1
    top = quantum + m.bit_length() - 1  # the exponent of the leading bit
    if top > fmt.emax:  # with an unbounded exponent this is beyond the largest: overflow
        return sign | fmt.infinity
    fraction_bits = fmt.precision - 1
    if m.bit_length() == fmt.precision:  # normal (a subnormal rounded up to 2**emin included)
        biased = top + fmt.bias
        return sign | (biased << fraction_bits) | (m - (1 << fraction_bits))
    assert quantum == fmt.quantum_min, (p, q, quantum)  # subnormal: the fixed quantum
    return sign | m


def round_fraction(value: Fraction, fmt: Binary) -> int:
    """A nonzero rational rounded once to nearest even (see :func:`round_rational`)."""
    return round_rational(value.numerator, value.denominator, fmt)


def _round_to_grid(datum: Datum, unit: int, split: int | None = None) -> int:
    """The signed mantissa of ``datum`` on the grid ``2**unit``, rounded half to even: in units
    of ``2**unit``. ``split``: :data:`FLOAT64_LOW_WORD_ROUNDS_TWICE`'s model instead."""
    shift = unit - datum.exponent
    if shift <= 0:
        return datum.signed_mantissa << -shift
    if split is None:
        return _half_even(datum.signed_mantissa, 1 << shift)
    # s = m / 2**shift; high = floor(s / 2**split); the low rest, 0 <= rest < 2**split, is
    # rounded to float64 (the subtraction s - high * 2**split) and then to an integer
    high = datum.signed_mantissa >> (shift + split)
    rest = datum.signed_mantissa - (high << (shift + split))  # in units of 2**-shift
    low = 0
    if rest:
        rounded = decode(round_rational(rest, 1 << shift, FORMATS["float64"]), FORMATS["float64"])
        low = _half_even(
            rounded.mantissa << max(rounded.exponent, 0), 1 << max(-rounded.exponent, 0)
        )
    return (high << split) + low


def grid_bits(fmt: Binary, total_addends: int) -> int:
    """``B``: the grid's bits below ``2**top`` for ``R`` addends per element (exact.py, step 2):
    ``P = 53 - ceil(log2 R)``, twice that for float64 (two words)."""
    p = 53 - (total_addends - 1).bit_length()
    return 2 * p if fmt.precision == 53 else p


def _grid_unit(data: Sequence[Datum], fmt: Binary, total_addends: int) -> int:
    """The exponent of the element's grid unit, ``top - B``: ``2**(top-1) <= max|x| < 2**top``
    for a normal largest addend, ``top = emin + 1`` when it is subnormal or zero."""
    tops = [d.exponent + d.mantissa.bit_length() for d in data if d.mantissa]
    top = max([fmt.emin + 1, *tops])  # a subnormal's leading bit is below 2**emin
    return top - grid_bits(fmt, total_addends)


def exact_sum(
    addends: Sequence[int],
    fmt: Binary,
    divisor: int = 1,
    grid_addends: int | None = None,
    round_sum_first: bool = False,
    split_low_word: int | None = None,
) -> int:
    """One element: the bit pattern of the addends' exact sum (divided by ``divisor``) rounded
    once, by IEEE-754's rules for specials, zeros and overflow.

    Args:
      addends: the addends' bit patterns in ``fmt``.
      divisor: a positive integer (a MEAN's replica count), 1 for a SUM.
      grid_addends: ``R`` for exact.py's documented grid (module docstring), or ``None`` for the
        exact sum of the addends themselves.
      round_sum_first: round the sum into ``fmt`` first and then divide it (two roundings, as
        a plain sum followed by ``truediv``) instead of rounding the exact quotient once.
      split_low_word: put each addend on the grid as :data:`FLOAT64_LOW_WORD_ROUNDS_TWICE`
        says, with a low word of this many bits, instead of rounding it once.
    """
    if divisor < 1:
        raise ValueError(f"divisor must be a positive integer, not {divisor}")
    data = [decode(b, fmt) for b in addends]
    if any(d.kind == "nan" for d in data):
        return fmt.quiet_nan
    positive = any(d.kind == "inf" and not d.negative for d in data)
    negative = any(d.kind == "inf" and d.negative for d in data)
    if positive and negative:
        return fmt.quiet_nan  # inf + -inf: invalid
    if positive or negative:
        return fmt.infinity | (fmt.sign_bit if negative else 0)
    if grid_addends is not None:
        unit = _grid_unit(data, fmt, grid_addends)
        total = sum(_round_to_grid(d, unit, split_low_word) for d in data)
        exponent = unit
    else:
        exponent = min(d.exponent for d in data)
        total = sum(d.signed_mantissa << (d.exponent - exponent) for d in data)
    if total == 0:  # exact: -0 only when every addend is -0
        return fmt.sign_bit if all(d.is_negative_zero for d in data) else 0
    p, q = (total << exponent, 1) if exponent >= 0 else (total, 1 << -exponent)
    if round_sum_first and divisor != 1:
        return divide_bits(round_rational(p, q, fmt), divisor, fmt)
    return round_rational(p, q * divisor, fmt)


def divide_bits(bits: int, divisor: int, fmt: Binary) -> int:
    """IEEE division of one value by a positive integer, rounded once."""
    d = decode(bits, fmt)
    if d.kind != "finite" or d.mantissa == 0:  # NaN, +-inf and +-0 keep themselves
        return fmt.quiet_nan if d.kind == "nan" else bits
    value = d.fraction() / divisor
    return round_fraction(value, fmt)


def _format_of(dtype: Any) -> tuple[str, Binary]:
    name = np.dtype(dtype).name
    if name not in FORMATS:
        raise TypeError(f"the IEEE reference takes float16, float32 or float64, not {name}")
    return name, FORMATS[name]


def bit_patterns(array: np.ndarray) -> list[int]:
    """The elements' bit patterns, flattened (a real float array)."""
    name, _ = _format_of(array.dtype)
    return np.ascontiguousarray(array).reshape(-1).view(UINTS[name]).tolist()


def from_bits(bits: Sequence[int], dtype: Any) -> np.ndarray:
    """A flat ``dtype`` array holding the bit patterns ``bits``."""
    name, _ = _format_of(dtype)
    return np.array(bits, dtype=UINTS[name]).view(np.dtype(name))


def reference_sum(
    addends: Sequence[np.ndarray],
    divisor: int = 1,
    grid_addends: int | None = None,
    round_sum_first: bool = False,
    split_low_word: int | None = None,
) -> np.ndarray:
    """Per element, :func:`exact_sum` of real float arrays of one dtype and shape.

    Complex arrays: call it on each one's real parts and imaginary parts (``.real``, ``.imag``).
    """
    first = np.asarray(addends[0])
    name, fmt = _format_of(first.dtype)
    if any(np.asarray(a).dtype != first.dtype or np.shape(a) != first.shape for a in addends):
        raise TypeError("reference_sum takes addends of one dtype and one shape")
    columns = zip(*(bit_patterns(np.asarray(a)) for a in addends), strict=True)
    out = [
        exact_sum(c, fmt, divisor, grid_addends, round_sum_first, split_low_word) for c in columns
    ]
    return from_bits(out, name).reshape(first.shape)


def reference_divide(values: np.ndarray, divisor: int) -> np.ndarray:
    """Per element, :func:`divide_bits`: IEEE division by a positive integer."""
    array = np.asarray(values)
    name, fmt = _format_of(array.dtype)
    out = [divide_bits(b, divisor, fmt) for b in bit_patterns(array)]
    return from_bits(out, name).reshape(array.shape)


def same_values(got: np.ndarray, want: np.ndarray) -> bool:
    """Same dtype, shape and bits, except that any NaN matches any NaN (IEEE-754 leaves a NaN
    result's sign and payload open)."""
    got, want = np.asarray(got), np.asarray(want)
    if got.dtype != want.dtype or got.shape != want.shape:
        return False
    if got.dtype.kind == "c":
        return same_values(got.real, want.real) and same_values(got.imag, want.imag)
    both_nan = np.isnan(got) & np.isnan(want)
    g = np.where(both_nan, np.zeros_like(got), got)
    w = np.where(both_nan, np.zeros_like(want), want)
    return bool(np.ascontiguousarray(g).tobytes() == np.ascontiguousarray(w).tobytes())


# -- mwms_mpi's float64 rules beside "rounded once", and bugs modelled while they lasted --

FLOAT64_MEAN_ROUNDS_TWICE = True
"""A float64 MEAN rounds the exact sum to float64 and then divides it: two roundings, and an
overflow to inf where the quotient fits (exact.py ``to_floats``: ``v`` is the rounded sum before
``v /= divisor``). Documented (exact.py, README), as TF's own sum-then-``truediv`` MEAN does;
pinned by ``test_a_float64_mean_divides_the_sum_rounded_to_float64``."""

FLOAT64_LOW_WORD_ROUNDS_TWICE = False
"""A negative float64 addend with bits below its grid is rounded twice onto it: ``to_words``
takes ``h = floor(s / 2**P)`` and ``s - h * 2**P``, a float64 subtraction that rounds when
``s < 0`` (the rest is larger than ``|s|``), before ``rint`` rounds it again (more than half a
grid unit off, and not always to even). Pinned by
``test_a_negative_float64_addend_is_rounded_onto_the_grid_once``."""


def known_deviations(dtype: Any, divisor: int, total_addends: int) -> dict[str, Any]:
    """:func:`reference_sum`'s keyword arguments for what mwms_mpi does today with ``R`` addends
    of ``dtype`` (real) divided by ``divisor``: empty once every flag above is False."""
    if np.dtype(dtype) != np.float64:
        return {}
    out: dict[str, Any] = {}
    if FLOAT64_MEAN_ROUNDS_TWICE and divisor != 1:
        out["round_sum_first"] = True
    if FLOAT64_LOW_WORD_ROUNDS_TWICE:
        out["split_low_word"] = grid_bits(FORMATS["float64"], total_addends) // 2
    return out
