"""Grouping many arrays into few contiguous buffers, so a batch costs one MPI call per pack.

The grouping is TensorFlow's ``cross_device_utils.group_by_size``; the order is TF's
``CollectiveAllReduce``: values are packed in reversed order (gradients are produced back to
front), and results are returned in the caller's order.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np


def group_by_size(sizes: Sequence[int], bytes_per_pack: int) -> list[list[int]]:
    """Groups positions ``0..len(sizes)-1`` into packs of about ``bytes_per_pack`` bytes.

    TF's rule: a new pack starts once the current one holds *more* than ``bytes_per_pack``
    bytes, so packs err on the side of being few and large; ``bytes_per_pack == 0`` gives one
    pack. The order of positions is kept.

    Args:
      sizes: the size in bytes of each value, in the order they will be packed.
      bytes_per_pack: the target pack size; 0 for a single pack.

    Returns:
      Lists of positions into ``sizes``, one list per pack (no empty packs; ``[]`` for none).
    """
    if not sizes:
        return []
    if bytes_per_pack == 0:
        return [list(range(len(sizes)))]
    packs: list[list[int]] = []
    last_pack_size = 0
    for i, size in enumerate(sizes):
        if not packs or last_pack_size > bytes_per_pack:
            packs.append([])
            last_pack_size = 0
        packs[-1].append(i)
        last_pack_size += size
    return packs


class Segment(NamedTuple):
    """One array's place in a pack buffer."""

    position: int  # place in the caller's list
    offset: int  # first element in the buffer
    size: int  # number of elements
    shape: tuple[int, ...]


class Chunk(NamedTuple):
    """The arrays of one pack that share a dtype: they become one buffer and one MPI call."""

    dtype: Any
    total: int
    segments: tuple[Segment, ...]


def plan_batch(
    dtypes: Sequence[Any], shapes: Sequence[tuple[int, ...]], bytes_per_pack: int
) -> tuple[Chunk, ...]:
    """Plans a batch reduction: TF's reversed-order packs, then one chunk per dtype per pack.

    Args:
      dtypes: each array's dtype (the same on every rank; the caller has agreed on it).
      shapes: each array's shape.
      bytes_per_pack: as in ``CommunicationOptions``.

    Returns:
      Chunks in the order their MPI calls are issued. Arrays with no elements are left out
      (nothing to reduce); the caller gives them empty results.
    """
    order = [i for i in reversed(range(len(shapes)))]
    sizes = []
    counts = []
    for i in order:
        count = 1
        for d in shapes[i]:
            count *= d
        counts.append(count)
        sizes.append(count * dtypes[i].itemsize)
    chunks: list[Chunk] = []
    for pack in group_by_size(sizes, bytes_per_pack):
        by_dtype: dict[Any, list[Segment]] = {}
        totals: dict[Any, int] = {}
        for p in pack:
            i = order[p]
            if counts[p] == 0:
                continue
            dtype = dtypes[i]
            offset = totals.get(dtype, 0)
            by_dtype.setdefault(dtype, []).append(Segment(i, offset, counts[p], shapes[i]))
            totals[dtype] = offset + counts[p]
        # dict order is insertion order: the first dtype met in the pack goes first on every rank.
        for dtype, segments in by_dtype.items():
            chunks.append(Chunk(dtype, totals[dtype], tuple(segments)))
    return tuple(chunks)


def pack(chunk: Chunk, arrays: Sequence[Any], buffer: Any, xp: Any = np) -> None:
    """Copies the chunk's arrays into ``buffer``, each at its offset, casting to the wire dtype.

    One ``concatenate`` into ``buffer`` copies every input once in C (a non-contiguous input is
    flattened into a temporary first); it was 1.6x faster than slice assignments for 200 arrays,
    and numpy's ``axis=None`` (flatten in C) 1.8x faster again than a ``reshape`` per array.
    ``xp`` is the arrays' module (``cupy`` packs on the GPU, into one device buffer).
    """
    members = [arrays[seg.position] for seg in chunk.segments]
    if len(members) == 1:
        buffer[...] = members[0].reshape(-1)
    elif xp is np:
        np.concatenate(members, axis=None, out=buffer)
    else:
        xp.concatenate([m.reshape(-1) for m in members], out=buffer)


def unpack(buffer: Any, chunk: Chunk, out: list[Any]) -> None:
    """Puts each array's slice of a reduced buffer, in its shape, at its place in ``out``.

    The results are views into ``buffer``, which was made for this call alone: no copy, and
    no aliasing with anything the caller or a cache holds.
    """
    for position, offset, size, shape in chunk.segments:
        view = buffer[offset : offset + size]
        out[position] = view if len(shape) == 1 else view.reshape(shape)


def reduce_chunks(
    chunks: Sequence[Chunk],
    arrays: Sequence[Any],
    op: Any,
    backend: Any,
    comm: Any,
    take: Any,
    blocking: bool,
) -> tuple[list[Any], list[Any]]:
    """Packs each chunk into a buffer from ``take`` and all-reduces it (one MPI call a chunk).

    A chunk of one contiguous array of the wire dtype is reduced out of place, without packing.

    Args:
      chunks: the batch's plan (:func:`plan_batch`).
      arrays: the caller's arrays.
      op: the reduction (``Op``).
      backend: the collective backend of the arrays' kind.
      comm: the data communicator.
      take: ``take(shape, dtype)`` -> a buffer nobody else references.
      blocking: complete each call before the next (no deadline).

    Returns:
      The results by position (``None`` for arrays with no elements), views of the buffers,
      and the requests to wait for (``None`` entries when blocking).
    """
    out: list[Any] = [None] * len(arrays)
    requests = []
    for chunk in chunks:
        buffer = take((chunk.total,), chunk.dtype)
        alone = arrays[chunk.segments[0].position] if len(chunk.segments) == 1 else None
        if alone is not None and alone.dtype == chunk.dtype and backend.is_sendable(alone):
            send = alone.reshape(-1)
        else:
            send = None
            pack(chunk, arrays, buffer, backend.xp)
        requests.append(backend.all_reduce(comm, send, buffer, op, blocking))
        unpack(buffer, chunk, out)
    return out, requests
