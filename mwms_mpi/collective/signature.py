"""What ranks agree on for each collective call, and the error text when they do not.

A :class:`Layout` is what the data movement needs to match (kind, op, dtypes, shapes, options);
its :func:`digest` comes from a fixed hash (never Python's ``hash``, which differs per process),
so equal layouts give equal digests on every rank; the caller's context (``call_context``: the
API or purpose, op, axis, the value's nested structure, in ``callsite`` mode the source line)
is digested the same way. Only when the ranks' fingerprints differ do they exchange full
:class:`Signature` objects, so that every rank raises the same ``InvalidArgumentError`` naming
what each rank called and the first thing that differs.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import NamedTuple

from mwms_mpi.collective.call_context import CallContext

ANY = -1  # a dimension that may differ between ranks (the gather axis)
# The context's fields compared after the API itself, in the order a message reports them:
# (label, index in CallContext).
_CONTEXT_FIELDS = (("op", 1), ("axis", 2), ("structure", 4), ("value kind", 3), ("call site", 5))
_ONE_VALUE = "(a single dense value)"  # how an empty structure text reads
_LISTED = 120  # a structure is cut to this many characters where every rank's call is listed
_SHOWN = 200  # and to about this many around its first difference where two are compared
# What a layout without the extra means (host arrays carry no "arrays"/"transport" extras).
_EXTRA_DEFAULTS: dict[str, object] = {"arrays": "numpy", "transport": "host"}


class Layout(NamedTuple):
    """What every rank's data must match for one collective call."""

    kind: str  # "all_reduce", "batch_all_reduce", "all_gather", "broadcast", "barrier", ...
    op: str  # "SUM" / "MAX" / "MIN", or "" where there is no reduction
    items: tuple[tuple[str, tuple[int, ...]], ...]  # (dtype name, shape) per array
    extra: tuple[tuple[str, object], ...] = ()  # e.g. (("root", 0),) or (("bytes_per_pack", 0),)


class Signature(NamedTuple):
    """One rank's view of a call, exchanged only when the ranks' fingerprints differ."""

    call: int  # the call's number on its communicator
    layout: Layout | None  # None when this rank's arguments were invalid
    context: CallContext | None  # what the user called (see call_context)
    error: str  # "ValueError: ..." when this rank found its own arguments invalid, else ""


def digest(value: object) -> int:
    """A 56-bit digest of ``repr(value)``: stable across processes, positive, safe to negate."""
    raw = hashlib.blake2b(repr(value).encode(), digest_size=7).digest()
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


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def describe_signature(signature: Signature) -> str:
    """What one rank called, in a line: the public call, then the collective or the error."""
    head = ""
    context = signature.context
    if context is not None:
        api, op, axis, kind, structure, site = context
        args = (
            op,
            axis and f"axis={axis}",
            kind,
            structure and f"structure={_cut(structure, _LISTED)}",
            site and f"at {site}",
        )
        api = api or "(no API)"
        sep = " " if " " in api else ""  # "Strategy.reduce(SUM)", "SyncOnRead read of `m` (SUM)"
        head = api + sep + "(" + ", ".join(x for x in args if x) + ") "
    body = signature.error or (describe(signature.layout) if signature.layout else "")
    return f"{head}-> {body}" if head else body


def _excerpts(mine: str, theirs: str) -> tuple[str, str]:
    """Two texts that differ, each cut to about :data:`_SHOWN` characters around the first
    place where they differ (nested structures can be long; the difference is what matters)."""
    if len(mine) <= _SHOWN and len(theirs) <= _SHOWN:
        return mine, theirs
    first = next(
        (i for i, (a, b) in enumerate(zip(mine, theirs, strict=False)) if a != b),
        min(len(mine), len(theirs)),
    )
    start = max(0, first - _SHOWN // 4)

    def window(text: str) -> str:
        part = text[start : start + _SHOWN]
        return ("..." if start else "") + part + ("..." if start + _SHOWN < len(text) else "")

    return window(mine), window(theirs)


def _layout_difference(mine: Layout, theirs: Layout) -> tuple[str, str]:
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
    mine_extra, their_extra = dict(mine.extra), dict(theirs.extra)
    for key in [*mine_extra, *(k for k in their_extra if k not in mine_extra)]:
        default = _EXTRA_DEFAULTS.get(key, "(none)")
        mine_value, their_value = mine_extra.get(key, default), their_extra.get(key, default)
        if mine_value != their_value:
            return f"{key} {mine_value}", str(their_value)
    return describe(mine), describe(theirs)


def difference(mine: Signature, theirs: Signature) -> tuple[str, str]:
    """The first thing in which two ranks' calls differ, as (mine, theirs) texts."""
    if mine.error or theirs.error:
        return (
            mine.error or f"valid arguments ({describe_signature(mine)})",
            theirs.error or f"valid arguments ({describe_signature(theirs)})",
        )
    if mine.context != theirs.context:
        if mine.context is None or theirs.context is None:
            return describe_signature(mine), describe_signature(theirs)
        ours, other = mine.context, theirs.context
        if ours[0] != other[0]:
            return f"call {ours[0] or '(no API)'}", other[0] or "(no API)"
        for label, i in _CONTEXT_FIELDS:
            a, b = ours[i], other[i]
            if a != b:
                if label == "structure":
                    a, b = _excerpts(a or _ONE_VALUE, b or _ONE_VALUE)
                return f"{label} {a or '(none)'}", b or "(none)"
    if mine.layout is not None and theirs.layout is not None and mine.layout != theirs.layout:
        return _layout_difference(mine.layout, theirs.layout)
    if mine.call != theirs.call:
        return f"call {mine.call}", f"call {theirs.call}"
    return describe_signature(mine), describe_signature(theirs)


def mismatch_message(what: str, rank: int, signatures: Sequence[Signature], comm_name: str) -> str:
    """The error text one rank raises when the ranks' calls disagree.

    It compares this rank's call with rank 0's (or, if they agree, with the first rank that
    differs), e.g. ``"Strategy.reduce on rank 2: op MEAN != SUM on rank 0 (...)"``, or, when
    the two called different APIs, names each: ``"... ranks called different APIs: SyncOnRead
    read of `accuracy` on rank 0, Strategy.reduce on rank 1 (...)"``; then it lists every
    distinct call with the ranks that made it.

    Args:
      what: what this rank was asked to do (the public API's name, else the collective's).
      rank: this rank.
      signatures: every rank's signature, by rank.
      comm_name: the communicator's name.
    """
    mine = signatures[rank]
    other = 0 if signatures[0] != mine else next(q for q, s in enumerate(signatures) if s != mine)
    theirs = signatures[other]
    apis = _apis(mine, theirs)
    if apis is not None:  # two purposes: name each with its rank, in rank order
        pair = sorted([(rank, apis[0]), (other, apis[1])])
        head = "ranks called different APIs: " + ", ".join(f"{a} on rank {q}" for q, a in pair)
    else:
        a, b = difference(mine, theirs)
        head = f"{a} != {b} on rank {other}"
    groups: dict[str, list[int]] = {}
    for q, s in enumerate(signatures):
        groups.setdefault(describe_signature(s), []).append(q)
    listing = "; ".join(f"ranks {qs}: {text}" for text, qs in groups.items())
    return (
        f"{what} on rank {rank}: {head} (call {mine.call} on communicator {comm_name}; calls "
        f"by rank: {listing})"
    )


def _apis(mine: Signature, theirs: Signature) -> tuple[str, str] | None:
    """The two public APIs (purposes) when two valid calls differ in that, else ``None``."""
    if mine.error or theirs.error or mine.context is None or theirs.context is None:
        return None
    a, b = mine.context[0], theirs.context[0]
    return (a, b) if a and b and a != b else None
