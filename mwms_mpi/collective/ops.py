"""The collective layer's own reduction vocabulary: SUM, MAX, MIN (MEAN lives a layer above).

``MEAN`` is ``SUM`` divided by the number of replicas, which only the strategy layer knows; the
collective layer never divides by its communicator's size (docs/architecture.md, "Errors").
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from typing import Any

import numpy as np

from mwms_mpi.collective.arguments import refusable


class Op(enum.Enum):
    """An element-wise reduction every rank applies to the same layout."""

    SUM = "SUM"
    MAX = "MAX"
    MIN = "MIN"

    # Members are singletons, so identity hashing is correct, and it is several times faster
    # than Enum's name hashing on the per-call path (layout keys, backend op tables).
    __hash__ = object.__hash__


def as_op(op: Op | str) -> Op:
    """``op`` itself, or the ``Op`` named by a string in any case (``"sum"``, ``"MAX"``).

    Raises:
      ValueError: for another name or type (MEAN included: it is a strategy-level reduction).
    """
    if type(op) is Op:
        return op
    if isinstance(op, str) and op.upper() in Op.__members__:
        return Op[op.upper()]
    raise refusable(
        ValueError(
            f"{op!r} is not a collective reduction: use Op.SUM, Op.MAX or Op.MIN (or their "
            "names); MEAN is SUM divided by the number of replicas, which the strategy layer does"
        )
    )


# Each op as a ufunc combining a rank's local addends (``ufunc(a, b, out=...)``).
COMBINE: dict[Op, Callable[..., Any]] = {Op.SUM: np.add, Op.MAX: np.maximum, Op.MIN: np.minimum}
# The same ufuncs by name, for an array module other than numpy (``getattr(cupy, name)``).
COMBINE_NAMES: dict[Op, str] = {Op.SUM: "add", Op.MAX: "maximum", Op.MIN: "minimum"}
