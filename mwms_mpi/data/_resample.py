"""``Dataset.rejection_resample``: TF 2.21's Python composition, in numpy.

The acceptance probabilities are TF's float32 arithmetic (``target / (initial + tiny)``,
rescaled between its min and max); without ``initial_dist`` the class distribution is
estimated per batch of 32 class values from counts starting at 10 (TF's
``_estimate_initial_dist_ds``). Elements are kept where TF's seeded uniform draw
(``_random.Accept``) is below their class's acceptance, and mixed with the original elements
by ``sample_from_datasets`` (its TF choices) with the min ratio as the original's weight.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from mwms_mpi._constant import to_array
from mwms_mpi.data import _random

_BATCH = 32  # TF's dist_estimation_batch_size
_SMOOTHING = 10  # TF's smoothing_constant


def acceptance(initial: np.ndarray, target: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """TF's ``_calculate_acceptance_probs_with_mixing``: per-class acceptance probabilities and
    the probability of taking an original element (float32)."""
    with np.errstate(all="ignore"):
        ratio = target / (initial + np.finfo(np.float32).tiny)
        low, high = ratio.min(), ratio.max()
        return (ratio - low) / (high - low), np.asarray(low, np.float32)


def _estimated(target: np.ndarray, classes: Any) -> Any:
    """TF's running estimate of the class distribution, one row per element (each batch of
    32 class values updates the counts; its row is repeated 32 times)."""
    count = target.shape[0]

    def update(seen: np.ndarray, batch: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        values = np.asarray(batch).astype(np.int64)
        inside = values[(values >= 0) & (values < count)]  # one_hot of others is zeros
        seen = seen + np.bincount(inside, minlength=count).astype(np.int64)
        dist = (seen / seen.sum()).astype(np.float32)
        return seen, np.tile(dist[None], [_BATCH, 1])

    start = np.full([count], _SMOOTHING, np.int64)
    return classes.batch(_BATCH).scan(start, update).unbatch()


def rejection_resample(
    dataset: Any, class_func: Callable[..., Any], target_dist: Any, initial_dist: Any, seed: Any
) -> Any:
    """``dataset.rejection_resample(class_func, target_dist, initial_dist, seed)`` as TF
    composes it; the elements are ``(class value, element)``."""
    cls = type(dataset)
    target = to_array(target_dist).astype(np.float32)
    seeds = _random.op_seeds(seed)

    def add_class_value(*x: Any) -> Any:
        return class_func(*x), (x[0] if len(x) == 1 else x)

    static = None
    if initial_dist is not None:
        initial = to_array(initial_dist).astype(np.float32)
        accept, mix = acceptance(initial, target)
        accepts = cls.from_tensors(accept).repeat()
        mixes = cls.from_tensors(mix).repeat()
        with np.errstate(all="ignore"):
            static = np.min(target / initial)
    else:
        both = _estimated(target, dataset.map(class_func)).map(lambda i: acceptance(i, target))
        accepts = both.map(lambda a, _: a)
        mixes = both.map(lambda _, m: m)

    def gather(accept: np.ndarray, data: Any) -> Any:
        value = class_func(*data) if isinstance(data, tuple) else class_func(data)
        return value, accept[np.asarray(value)], data

    classed = cls.zip((accepts, dataset)).map(gather)
    kept = classed._then(_random.Accept(classed._node, seeds))
    filtered = kept.map(lambda value, _, data: (value, data))
    if static == 1:
        return dataset.map(add_class_value)
    if static == 0:
        return filtered
    weights = mixes.map(lambda p: [(p, np.float32(1.0) - p)])
    return cls.sample_from_datasets(
        [dataset.map(add_class_value), filtered],
        weights=weights,
        seed=seed,
        stop_on_empty_dataset=True,
    )
