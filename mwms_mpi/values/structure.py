"""The nested structure of a value, as every rank's agreement sees it (docs/agreement.md).

TF flattens a nest and reduces it position by position: ``{"a": x, "b": y}`` on one worker and
``{"a": x, "c": y}`` on another sum ``b`` with ``c``, silently. Here the public API puts the
value's structure into its call's context (``call_context.api_call``), which every rank agrees
before data moves, so that difference raises on every rank, naming both structures. What
counts is what decides the positions and how results are packed back: mapping keys (sorted, as
``tf.nest`` flattens them; insertion order never matters), sequence lengths and types,
namedtuple types (qualified name and fields), ``None`` leaves, dense against sparse values
(``IndexedSlices``). Dtypes and shapes are the layout's business.

The text is cheap where it matters: one dense value (a plain array, the per-step path of
``strategy.reduce``) is ``""`` after one type check, so the context, and the digest cached for
it, stay the same call after call.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from mwms_mpi import nest
from mwms_mpi.values.distributed import DistributedValues
from mwms_mpi.values.indexed_slices import IndexedSlices

DENSE = "."  # a dense leaf inside a structure
SPARSE = "IndexedSlices"
NONE = "None"


def of(value: Any) -> str:
    """The structure text of ``value``: ``""`` for one dense value, else ``nest.describe``'s
    text with ``.`` for each dense leaf, ``IndexedSlices`` and ``None`` for the others.

    A distributed value (``PerReplica``, ``Mirrored``, a variable) is a leaf of its first
    component's kind; a component that is itself nested is described as such.
    """
    if type(value) is np.ndarray:
        return ""
    text = nest.describe(value, _leaf)
    return "" if text == DENSE else text


def of_value(value: Any) -> str:
    """The structure of a value as an API that takes one value sees it (``Strategy.reduce`` and
    ``gather``, ``reduce_to``, each value of ``batch_reduce_to``): ``""`` for whatever it
    converts into one dense array (an array, a number, a list or tuple: ``tf.constant``'s
    rule, so ``[1.0, 2.0]`` on one rank and ``np.array([1.0, 2.0])`` on another agree),
    ``IndexedSlices`` for sparse, a distributed value as its components, and a mapping (which
    such an API refuses) as what it is, for the message."""
    if type(value) is np.ndarray:
        return ""
    if isinstance(value, IndexedSlices):
        return SPARSE
    if isinstance(value, DistributedValues):
        components = value._values
        return of_value(components[0]) if components else ""
    if isinstance(value, Mapping):
        return of(value)
    return ""


def of_pairs(value_destination_pairs: Any) -> str:
    """The structure of the values of ``batch_reduce_to``'s pairs (destinations say where
    results go on this worker, not what is reduced), each as :func:`of_value` sees it, or of
    the whole argument if it is not a list or tuple of pairs (the API then raises, on every
    rank). Never consumes an iterator: a one-shot iterable is described as such (the caller
    lists it first)."""
    if not isinstance(value_destination_pairs, list | tuple):
        return of(value_destination_pairs)
    try:
        values = [value for value, _ in value_destination_pairs]
    except (TypeError, ValueError):
        return of(value_destination_pairs)
    # of_value's first case (an array) read in the loop: a batch of 200 gradients is arrays
    texts = [DENSE if type(v) is np.ndarray else (of_value(v) or DENSE) for v in values]
    return "[" + ", ".join(texts) + "]"


def _leaf(value: Any) -> str:
    if type(value) is np.ndarray:
        return DENSE
    if value is None:
        return NONE
    if isinstance(value, IndexedSlices):
        return SPARSE
    if isinstance(value, DistributedValues):
        components = value._values
        if components:
            return nest.describe(components[0], _leaf)
    return DENSE
