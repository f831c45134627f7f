"""Layout signatures, so ranks that call mismatched collectives get an error, not a hang.

Before a collective whose layout (kind, op, dtypes, shapes, options) a communicator has not
seen, every rank contributes a small digest of it; if the digests differ, the ranks exchange the
layouts themselves and every rank raises ``InvalidArgumentError`` with a message that names the
op, the ranks and the first thing that differs. Digests come from a fixed hash (never Python's
``hash``, which differs per process), so equal layouts agree on every rank.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import NamedTuple

ANY = -1  # a dimension that may differ between ranks (the gather axis)


class Layout(NamedTuple):
    """What every rank must agree on for one collective call."""

    kind: str  # "all_reduce", "batch_all_reduce", "all_gather", "broadcast", "barrier", ...
    op: str  # "SUM" / "MAX" / "MIN", or "" where there is no reduction
    items: tuple[tuple[str, tuple[int, ...]], ...]  # (dtype name, shape) per array
    extra: tuple[tuple[str, object], ...] = ()  # e.g. (("root", 0),) or (("bytes_per_pack", 0),)


def digest(layout: Layout) -> int:
    """A 56-bit digest of ``layout``: stable across processes, positive, safe to negate."""
    raw = hashlib.blake2b(repr(tuple(layout)).encode(), digest_size=7).digest()
    return int.from_bytes(raw, "little")


def _shape(shape: tuple[int, ...]) -> str:
    dims = ["*" if d == ANY else str(d) for d in shape]
    return "(" + ", ".join(dims) + ("," if len(dims) == 1 else "") + ")"


def describe_item(item: tuple[str, tuple[int, ...]]) -> str:
    """``"(3, 4) float32"``; a ``*`` marks a dimension allowed to differ between ranks."""
    return f"{_shape(item[1])} {item[0]}"


def describe(layout: Layout, limit: int = 4) -> str:
    """A one-line summary of a whole layout, for listing every rank's view."""
    parts = [layout.kind]
    if layout.op:
        parts.append(layout.op)
    items = [describe_item(i) for i in layout.items[:limit]]
    if len(layout.items) > limit:
        items.append(f"... ({len(layout.items)} arrays)")
    parts.append("[" + ", ".join(items) + "]")
    parts.extend(f"{k}={v}" for k, v in layout.extra)
    return " ".join(parts)


def difference(mine: Layout, theirs: Layout) -> tuple[str, str]:
    """The first field in which two layouts differ, as (mine, theirs) texts."""
    if mine.kind != theirs.kind:
        return f"collective {mine.kind}", theirs.kind
    if mine.op != theirs.op:
        return f"op {mine.op}", theirs.op
    if len(mine.items) != len(theirs.items):
        return f"{len(mine.items)} arrays", f"{len(theirs.items)} arrays"
    for i, (a, b) in enumerate(zip(mine.items, theirs.items, strict=True)):
        if a != b:
            where = f"array {i}: " if len(mine.items) > 1 else ""
            if a[0] == b[0] and len(a[1]) == len(b[1]):
                return f"{where}shape {describe_item(a)}", describe_item(b)
            if a[1] == b[1]:
                return f"{where}dtype {describe_item(a)}", describe_item(b)
            return f"{where}{describe_item(a)}", describe_item(b)
    for (key, mine_value), (_, their_value) in zip(mine.extra, theirs.extra, strict=False):
        if mine_value != their_value:
            return f"{key} {mine_value}", str(their_value)
    return describe(mine), describe(theirs)


def mismatch_message(
    op_name: str, seq: int, rank: int, layouts: Sequence[Layout], comm_name: str
) -> str:
    """The error text one rank raises when the ranks' layouts disagree.

    It compares this rank's layout with rank 0's (or, if they agree, with the first rank that
    differs), e.g. ``"all_reduce #12 on rank 2: shape (3, 4) float32 != (3, 5) float32 on rank
    0"``, then lists every distinct layout with the ranks that passed it.
    """
    mine = layouts[rank]
    other = 0 if layouts[0] != mine else next(q for q, lay in enumerate(layouts) if lay != mine)
    a, b = difference(mine, layouts[other])
    groups: dict[str, list[int]] = {}
    for q, lay in enumerate(layouts):
        groups.setdefault(describe(lay), []).append(q)
    listing = "; ".join(f"ranks {qs}: {text}" for text, qs in groups.items())
    return (
        f"{op_name} #{seq} on rank {rank}: {a} != {b} on rank {other} "
        f"(communicator {comm_name}; layouts by rank: {listing})"
    )
