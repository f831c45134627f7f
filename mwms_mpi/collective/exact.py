"""Exact sums of floating-point addends: the same bits whatever the order or grouping.

Deterministic reductions (``config.experimental.enable_op_determinism``; docs/architecture.md,
"Deterministic reductions") pre-round every addend onto one grid per element, chosen from the
largest exponent among all ranks' addends, and add the grid's integers, which MPI adds exactly
and in any order. :class:`ExactSum` holds the steps for one layout (the communicator runs the
collectives between them):

1. :meth:`ExactSum.exponents`: per element, the largest biased exponent field among this
   rank's addends, and one trailing flag: whether any addend is NaN, infinite or -0, whose
   results do not follow from sums. (Collective: MAX.)
2. :meth:`ExactSum.to_words`: each addend as an integer on the grid ``2**(top - P)``, where
   ``|x| < 2**top`` bounds every addend of the element. With ``R`` addends in all,
   ``P = 53 - ceil(log2 R)``: every word and every partial sum is an integer below ``2**53``,
   so float64 holds and adds them exactly, MPI's float64 SUM included, in any order. float16
   and float32 take one word per element; float64 two (a high and a low word, ``2P`` bits), so
   that it is never less accurate than a plain float64 all-reduce. An addend is exact on the
   grid unless it lies more than ``P - 24`` binades (float32; float16: ``P - 11``; float64:
   ``2P - 53``) below the element's largest addend; below that it is rounded to nearest even,
   by at most half a grid unit: the only error besides the final rounding. (Collective: SUM.)
3. :meth:`ExactSum.to_floats`: the exact sum rounded once, to nearest even, into the output
   dtype; a float16 or float32 MEAN divides it first, in float64, and rounds the quotient once.
   float64 is the exception to "once": its two words are rounded to float64 (one rounding; a
   subnormal result is rounded again when it is scaled), and a MEAN divides that float64 sum,
   as TF's own MEAN (a sum, then ``truediv``) does, so it may round twice and overflows where
   the sum does. Every step is a function of the exact sum alone: the bits stay the same at
   any world size. Special values, when step 1's flag says some rank has them
   (:meth:`ExactSum.special_lanes`, one more MAX): any NaN, or +inf with -inf, gives NaN;
   otherwise an infinity gives that infinity; a finite sum too large gives +-inf; a zero sum is
   -0 only when every addend is -0.

Every branch depends on agreed quantities only (the global exponents and flag, ``R``), never on
one rank's data, so every rank makes the same collectives. Complex arrays are two reals. Work
is done in cache-sized chunks into buffers the caller owns: a fresh array per pass cost more
than the arithmetic.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np

from mwms_mpi.collective.arguments import refusable

MAX_ADDENDS = 1 << 20  # per element: the grid keeps at least 33 bits (float32 exact over 9)
CHUNK = 1 << 17  # elements per pass: fewer numpy calls; what one pass touches stays cached


class Format(NamedTuple):
    """The bit layout of one float dtype."""

    uint: Any  # the unsigned integer of the same width
    mantissa_bits: int  # stored fraction bits (the implicit bit excluded)
    exponent_bits: int
    bias: int
    words: int  # float64 words per element on the grid
    exponent_dtype: Any  # holds a biased exponent field (and the special flag)

    @property
    def max_field(self) -> int:
        """The exponent field of inf and NaN."""
        return (1 << self.exponent_bits) - 1


FORMATS: dict[Any, Format] = {
    np.dtype(np.float16): Format(np.uint16, 10, 5, 15, 1, np.uint8),
    np.dtype(np.float32): Format(np.uint32, 23, 8, 127, 1, np.uint8),
    np.dtype(np.float64): Format(np.uint64, 52, 11, 1023, 2, np.uint16),
}


def real_dtype(dtype: Any) -> Any:
    """The float dtype whose exact sums ``dtype`` needs (complex numbers are two reals)."""
    dtype = np.dtype(dtype)
    return np.dtype(dtype.char.lower()) if dtype.kind == "c" else dtype


def supports(dtype: Any) -> bool:
    """Whether a SUM of ``dtype`` goes through exact sums (floats and complex; not bool/int)."""
    return real_dtype(dtype) in FORMATS


def precision_bits(addends: int) -> int:
    """``P``: the bits of one word on the grid, with headroom for ``addends`` per element.

    Raises:
      ValueError: for more than :data:`MAX_ADDENDS` addends per element.
    """
    if not 1 <= addends <= MAX_ADDENDS:
        raise refusable(
            ValueError(
                f"deterministic sums take 1 to {MAX_ADDENDS} addends per element, not {addends}"
            )
        )
    return 53 - math.ceil(math.log2(addends))


class ExactSum:
    """The exact-sum steps for one layout: ``size`` real elements of ``dtype``, ``R`` addends.

    Args:
      dtype: the real float dtype of the addends and the result.
      size: real elements per addend (a complex array counts twice).
      total_addends: ``R``, addends per element over every rank (an agreed count).

    Raises:
      ValueError: for too many addends.
    """

    def __init__(self, dtype: Any, size: int, total_addends: int) -> None:
        self.dtype = np.dtype(dtype)
        self.fmt = FORMATS[self.dtype]
        self.size = size
        self.total_addends = total_addends
        self.p = precision_bits(total_addends)
        self.low = self.p if self.fmt.words == 2 else 0  # bits of the low word
        # the grid unit of field f is 2**(max(f, 1) - shift): |x| < 2**(max(f, 1) - bias + 1)
        self.shift = self.fmt.bias - 1 + self.p + self.low
        self._signed = np.dtype(f"i{np.dtype(self.fmt.uint).itemsize}")  # the bits, signed
        self._segments: dict[int, ExactSum] = {}
        self._shift32 = np.int32(self.shift)  # a numpy scalar: a Python int costs a cast per pass
        self._negative_zero = int(np.iinfo(self._signed).min)  # -0's bits, read as signed
        # float32: sign and field are the top 9 bits; a cast to the field's byte drops the sign
        field_bits = 8 * np.dtype(self.fmt.exponent_dtype).itemsize
        self._sign_falls_out = self.fmt.exponent_bits == field_bits
        # float32 addends are scaled and rounded in float32 (exact: see to_words)
        self._narrow = self.dtype if self.dtype == np.float32 else None

    def segment(self, size: int) -> ExactSum:
        """The same steps for ``size`` of this layout's elements (the same ``R``, so the same
        grid per element): exact sums are per element, so a layout may be summed segment by
        segment with the same bits."""
        if size == self.size:
            return self
        plan = self._segments.get(size)
        if plan is None:
            plan = self._segments[size] = ExactSum(self.dtype, size, self.total_addends)
        return plan

    @property
    def words(self) -> int:
        """float64 words per real element."""
        return self.fmt.words

    def exponents(self, addends: Sequence[np.ndarray], out: np.ndarray) -> None:
        """Step 1 into ``out`` (``size + 1`` of the format's exponent dtype).

        The bits shifted right by the mantissa's width are the sign and the field; cast
        straight into ``out``. float32's field fills a byte, so the cast drops the sign by
        itself (one pass); float16's and float64's do not, and ``abs`` clears it first
        (measured at half the time of shifting, casting and masking the signed bits). A -0 is
        found by one reduction: its bits, the sign alone, are the most negative integer of
        their width.

        Args:
          addends: this rank's addends, contiguous real arrays of ``size`` elements.
          out: the fields, at least 1 (a zero's or subnormal's field 0 counts as 1: the grid
            of field 1 holds them, and :meth:`_minus_unit` need not clamp), then 1 if any
            addend is NaN, infinite or -0, else 0.
        """
        fmt, n = self.fmt, self.size
        fields = out[:n]
        chunk = min(n, CHUNK)
        magnitude = None if self._sign_falls_out else np.empty(chunk, dtype=self.dtype)
        field = np.empty(chunk, dtype=fmt.exponent_dtype) if len(addends) > 1 else fields
        ones = np.ones(chunk, dtype=fmt.exponent_dtype)  # array operands: scalars are slower
        for lo in range(0, n, CHUNK):
            hi = min(n, lo + CHUNK)
            top, one = fields[lo:hi], ones[: hi - lo]
            for i, a in enumerate(addends):
                bits = a[lo:hi]
                if magnitude is not None:
                    bits = np.abs(bits, out=magnitude[: hi - lo])
                target = top if i == 0 else field[: hi - lo]
                np.right_shift(bits.view(fmt.uint), fmt.mantissa_bits, out=target, casting="unsafe")
                np.maximum(top, target if i else one, out=top)
        special = n > 0 and any(
            int(a.view(self._signed).min()) == self._negative_zero for a in addends
        )
        if not addends:
            fields[...] = 1
        out[n] = special or (n > 0 and int(fields.max()) == fmt.max_field)

    def to_words(
        self,
        addends: Sequence[np.ndarray],
        fields: np.ndarray,
        special: bool,
        out: np.ndarray,
        units: np.ndarray | None = None,
    ) -> None:
        """Step 2 into ``out`` (``size * words`` float64): this rank's addends on the grid.

        ``ldexp`` by the grid's exponent is exact and ``rint`` rounds half to even once.
        float32 addends are scaled and rounded in float32, then widened: a scaled addend is
        below ``2**P <= 2**53``, far inside float32's range, and keeps its 24 significant bits
        exactly, unless it falls below float32's normal range, where it is far below 1/2 and
        rounds to the same +-0 either way (measured a third faster than scaling into float64).
        float16 and float64 addends are scaled in float64 (at most 53 significant bits, far
        from its range ends; numpy widens float16 to float64 faster than to float32).

        Args:
          addends: this rank's addends (as for :meth:`exponents`).
          fields: the global largest field per element (step 1's MAX, flag dropped).
          special: the agreed flag: non-finite addends are left out of the sums (their results
            come from :meth:`special_lanes`).
          out: the words: the high words, then (float64) the low words.
          units: ``size`` int32 to keep each element's grid exponent in, for
            :meth:`to_floats` to reuse; ``None`` keeps them only per chunk.
        """
        n = self.size
        single = len(addends) == 1
        if not single:
            out[...] = 0
        chunk = min(n, CHUNK)
        exponent = np.empty(chunk, dtype=np.int32) if units is None else None
        scaled = np.empty(chunk, dtype=self._narrow or np.float64)
        high = np.empty(chunk, dtype=np.float64) if self.low else scaled
        for lo in range(0, n, CHUNK):
            hi = min(n, lo + CHUNK)
            m = hi - lo
            e = units[lo:hi] if units is not None else exponent[:m]  # type: ignore[index]
            s, h = scaled[:m], high[:m]
            self._minus_unit(fields[lo:hi], e)
            for a in addends:
                part = a[lo:hi]
                if special:
                    part = np.where(np.isfinite(part), part, 0)
                np.ldexp(part, e, out=s, dtype=s.dtype)
                if self.low:  # s = h * 2**low + l, |l| < 2**low: trunc, then the exact rest
                    # (trunc, not floor: a negative s's rest s - floor(...) * 2**low is larger
                    # than |s| and rounded in float64 before rint rounded it again)
                    np.ldexp(s, -self.low, out=h)
                    np.trunc(h, out=h)
                    self._add(out[lo:hi], h, single)
                    np.ldexp(h, self.low, out=h)
                    np.subtract(s, h, out=s)
                    np.rint(s, out=s)
                    self._add(out[n + lo : n + hi], s, single)
                else:
                    np.rint(s, out=s)
                    self._add(out[lo:hi], s, single)

    @staticmethod
    def _add(words: np.ndarray, part: np.ndarray, first: bool) -> None:
        """``words += part`` (widened to float64: exact), or ``words = part`` for the only
        addend (the words need no clearing then)."""
        if first:
            words[...] = part
        else:
            words += part

    def special_lanes(self, addends: Sequence[np.ndarray]) -> np.ndarray:
        """Per element (any NaN, any +inf, any -inf, any addend not -0), for a MAX over ranks.

        Returns:
          uint8 of shape ``(4, size)``.
        """
        out = np.zeros((4, self.size), dtype=np.uint8)
        for a in addends:
            out[0] |= np.isnan(a)
            out[1] |= np.isposinf(a)
            out[2] |= np.isneginf(a)
            out[3] |= ~((a == 0) & np.signbit(a))
        return out

    def to_floats(
        self,
        words: np.ndarray,
        fields: np.ndarray,
        out: np.ndarray,
        divisor: int = 1,
        lanes: np.ndarray | None = None,
        units: np.ndarray | None = None,
    ) -> None:
        """Step 3: the exact sums (divided by ``divisor``) rounded once into ``out``.

        Args:
          words: the global sums of words (step 2's SUM).
          fields: the global largest field per element.
          out: ``size`` elements of the real dtype.
          divisor: 1, or the number of replicas of a MEAN.
          lanes: the global special lanes, when some rank had a special value, else ``None``.
          units: the grid exponents :meth:`to_words` kept (made again from ``fields`` if
            ``None``); overwritten.
        """
        n = self.size
        exponent = np.empty(min(n, CHUNK), dtype=np.int32) if units is None else None
        value = np.empty(min(n, CHUNK), dtype=np.float64)
        with np.errstate(over="ignore"):
            for lo in range(0, n, CHUNK):
                hi = min(n, lo + CHUNK)
                m = hi - lo
                v = value[:m]
                if units is None:
                    e = exponent[:m]  # type: ignore[index]
                    self._minus_unit(fields[lo:hi], e)
                else:
                    e = units[lo:hi]
                np.negative(e, out=e)
                if self.low:  # hi * 2**low + lo: two exact floats; their sum rounds once
                    np.ldexp(words[lo:hi], self.low, out=v)
                    v += words[n + lo : n + hi]
                    np.ldexp(v, e, out=v)
                else:  # an integer below 2**53: exact, and so is its scaling
                    np.ldexp(words[lo:hi], e, out=v)
                if divisor != 1:
                    v /= divisor
                out[lo:hi] = v  # the one rounding into float32 / float16 (none for float64)
        if lanes is not None:
            _apply_specials(out, lanes)

    def _minus_unit(self, fields: np.ndarray, out: np.ndarray) -> None:
        """``-log2`` of each element's grid unit, into int32 ``out`` (``ldexp`` takes int32
        without a conversion; int64 exponents cost it eight times as much). ``fields`` are at
        least 1 (:meth:`exponents`)."""
        out[...] = fields
        np.subtract(self._shift32, out, out=out)


def _apply_specials(out: np.ndarray, lanes: np.ndarray) -> None:
    nan, pos, neg, not_negzero = (lanes[i].astype(bool) for i in range(4))
    out[nan | (pos & neg)] = np.nan
    out[~nan & pos & ~neg] = np.inf
    out[~nan & neg & ~pos] = -np.inf
    out[~not_negzero & (out == 0)] = -0.0
