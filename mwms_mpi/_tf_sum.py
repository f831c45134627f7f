"""TF's ``reduce_sum`` over every element, in the order TF's CPU kernel adds (Eigen's).

A float sum's last bits depend on the order of its additions. numpy adds pairwise; TF's CPU
kernel (Eigen's ``InnerMostDimReducer``, vectorized with AVX packets) keeps four packet
accumulators, adds the remaining packets and the scalar tail, folds the lanes in SSE's order,
and splits ranges over 1024 packets in two halves (a tree). Where a Keras or TF result rests on
such a sum (a gradient's norm for ``clipnorm``, the total of ``compute_average_loss``), the same
order gives the same bits.

Scope, measured against TF 2.21 on x86-64 (``tests/unit/test_tf_sum.py`` pins TF's outputs):
float16, float32 and float64 host arrays, bit for bit up to about 200,000 float32, 60,000
float64 or 1,000 float16 elements (1,961 float16 already differ). Above that, TF's kernel
shares the sum among threads, in as many blocks as its cost model gives for the machine's
cores, so TF's own bits depend on the machine; this keeps the single-thread order there.
float16 is Eigen's ``Packet8h`` (8 lanes): packets and tail add in float16, rounding at each
addition, but the lanes fold in float32 (Eigen's ``predux`` of a half packet widens it first)
and round once; each float16 addition is made in float32 and rounded, as Eigen's ``half`` does,
which keeps the first operand's NaN where numpy's float16 addition keeps the second's. Other
dtypes, and device (CuPy) arrays, are summed by their own library in the input's dtype.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from mwms_mpi._arrays import array_module

_LEAF_PACKETS = 1024  # Eigen's kLeafSize: ranges above this many packets are split in two
_PACKET_BYTES = 32  # an AVX register: 8 float32 or 4 float64 lanes
_HALF_LANES = 8  # Eigen's Packet8h: float16 is vectorized in 128-bit registers
_ORDERED = (np.float16, np.float32, np.float64)


def reduce_sum_all(x: Any) -> Any:
    """The sum of every element of ``x`` in its own dtype, as TF's ``reduce_sum(x)``: a 0-d
    array (TF's addition order for host float16/32/64, the library's sum otherwise)."""
    if _ordered(x):
        return reduce_sum_last(np.reshape(x, -1))
    xp = array_module(x)
    return xp.asarray(xp.sum(x, dtype=x.dtype))


def reduce_sum_last(x: np.ndarray) -> np.ndarray:
    """TF's ``reduce_sum(x, axis=-1)`` of a host float16/32/64 array: each row (every index
    of the leading axes) summed in the order of a full sum, which is what TF's kernel does for
    a reduction over trailing axes once it has collapsed them into one. Rows short enough for
    one leaf (all but huge ones) are summed together, lane by lane."""
    x = np.ascontiguousarray(x)
    lanes = _HALF_LANES if x.dtype == np.float16 else _PACKET_BYTES // x.dtype.itemsize
    count = x.shape[-1]
    if count <= lanes * _LEAF_PACKETS:
        return np.asarray(_leaf_sum(x, lanes), x.dtype)
    rows = x.reshape(-1, count)
    sums = [_range_sum(row, 0, count, lanes) for row in rows]
    return np.asarray(sums, x.dtype).reshape(x.shape[:-1])


def _ordered(x: Any) -> bool:
    """Whether ``x`` is a host array whose sums this module orders as TF does."""
    return isinstance(x, np.ndarray) and x.dtype in _ORDERED and x.dtype.isnative


def _range_sum(flat: np.ndarray, first: int, count: int, lanes: int) -> Any:
    """Eigen's tree: a range over ``_LEAF_PACKETS`` packets is two halves split on a packet
    boundary, added to a zero in order; a smaller one is a leaf."""
    if count > lanes * _LEAF_PACKETS:
        split = lanes * -(-(first + -(-count // 2)) // lanes)
        left = min(split - first, count)
        total = flat.dtype.type(0) + _range_sum(flat, first, left, lanes)
        if left < count:
            total = total + _range_sum(flat, split, count - left, lanes)
        return total
    return _leaf_sum(flat[first : first + count], lanes)


def _leaf_sum(x: np.ndarray, lanes: int) -> Any:
    """One leaf of every row (the last axis) at once: four packet accumulators over whole
    groups of four packets (each adding its packets in order: numpy's reduction along a
    non-contiguous axis is sequential), folded into the first in order; the remaining whole
    packets into it; the scalar tail in order; then ``tail + lanes folded``."""
    lead, count = x.shape[:-1], x.shape[-1]
    zero = x.dtype.type(0)
    packet = np.zeros((*lead, lanes), x.dtype)
    start = 0
    if count >= 4 * lanes:
        start = (count // (4 * lanes)) * 4 * lanes
        groups = x[..., :start].reshape(*lead, -1, 4, lanes)
        if x.dtype == np.float16:
            four = np.zeros((*lead, 4, lanes), x.dtype)
            for g in range(groups.shape[-3]):
                four = _add(four, groups[..., g, :, :])
        else:
            four = np.add.reduce(groups, axis=-3, initial=zero)
        packet = four[..., 0, :]
        for k in (1, 2, 3):
            # TF's float16 kernel keeps the NaN of the accumulator folded in (measured), so
            # the operands swap there: the same value, TF's NaN
            pair = (four[..., k, :], packet) if x.dtype == np.float16 else (packet, four[..., k, :])
            packet = _add(*pair)
    whole = (count // lanes) * lanes
    for j in range(start, whole, lanes):
        packet = _add(packet, x[..., j : j + lanes])
    tail = np.zeros(lead, x.dtype)
    for k in range(whole, count):
        tail = _add(tail, x[..., k])
    return _add(tail, _fold_lanes(packet))


def _add(a: Any, b: Any) -> Any:
    """``a + b`` as TF's CPU kernels add: float16 (Eigen's ``half``) through float32, rounded
    once, which gives numpy's value but keeps the first operand's NaN where both are NaN (numpy's
    float16 addition keeps the second's)."""
    if a.dtype == np.float16:  # numpy arrays and scalars only (never a Python number)
        return np.asarray(np.asarray(a, np.float32) + np.asarray(b, np.float32)).astype(np.float16)
    return a + b


def _fold_lanes(packet: np.ndarray) -> Any:
    """Eigen's ``predux`` over the last axis: the AVX register's halves added, then SSE's
    ``(a0+a2) + (a1+a3)`` (a float16 packet in float32, rounded to float16 once)."""
    if packet.dtype == np.float16:
        return _fold_lanes(packet.astype(np.float32)).astype(np.float16)
    while packet.shape[-1] > 2:
        half = packet.shape[-1] // 2
        packet = packet[..., :half] + packet[..., half:]
    return packet[..., 0] + packet[..., 1]
