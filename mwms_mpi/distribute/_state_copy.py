"""A copy in memory of the training state at one step, for ``ElasticHandler``'s rollback.

The state is what a ``Checkpoint`` would save (``train/_walk``): variables, their mirrored
forms copy by copy (no collective), ``SyncOnReadVariable``s aggregated (one collective each),
and numpy arrays. Each copy
is a fresh array owned here: restoring writes a fresh copy of it again, so a copy can be
restored twice (a second failure during the step that re-runs after the first).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from mwms_mpi import _arrays
from mwms_mpi.train._restore import assign
from mwms_mpi.train._walk import is_array, leaves, read_for_save
from mwms_mpi.types import VariableSynchronization
from mwms_mpi.values import DistributedValues
from mwms_mpi.values.variables import Variable


@dataclass(frozen=True)
class StateCopy:
    """The state before a step.

    Attributes:
      step: the steps completed when it was taken.
      position: the steps the input iterator had produced.
      saved: ``(key, component, copy of its value)`` for every component of every leaf.
    """

    step: int
    position: int
    saved: tuple[tuple[str, Any, Any], ...]


def _on_read(leaf: Any) -> bool:
    return getattr(leaf, "synchronization", None) == VariableSynchronization.ON_READ and (
        isinstance(leaf, DistributedValues)
    )


def _components(leaf: Any) -> tuple[Any, ...]:
    """A distributed variable's local copies, else the leaf itself. A ``SyncOnReadVariable``
    is one whole: its replicas' shares on a lost rank go with it, so it is copied as the
    checkpoint saves it (aggregated over every replica: a collective) and put back as a
    restore puts it back, as a fresh run restored at that step would have it."""
    if isinstance(leaf, DistributedValues) and not _on_read(leaf):
        return tuple(leaf._values)
    return (leaf,)


def _copy_of(key: str, component: Any) -> Any:
    if _on_read(component):
        return read_for_save(key, component)
    if isinstance(component, Variable):
        return _arrays.array_copy(component._value)  # the copy itself, never a read's agreement
    if is_array(component):
        return _arrays.array_copy(component)
    return np.array(component.numpy())  # a duck-typed variable of the user's


def _put(component: Any, saved: Any) -> None:
    if _on_read(component):
        assign(component, np.array(saved))
    elif isinstance(component, Variable):
        component._value = _arrays.array_copy(saved)
    elif is_array(component):
        component[...] = saved
    else:
        component.assign(np.array(saved))


def take(objects: Any, step: int, position: int) -> StateCopy:
    """Copies every component of every leaf under ``objects`` (a ``Checkpoint``, or the
    objects a checkpoint would be given)."""
    saved = tuple(
        (key, component, _copy_of(key, component))
        for key, leaf in leaves({"state": objects})
        for component in _components(leaf)
    )
    return StateCopy(step, position, saved)


def restore(objects: Any, copy: StateCopy) -> None:
    """Writes ``copy`` back.

    Raises:
      RuntimeError: if a variable under ``objects`` did not exist when ``copy`` was taken (it
        was created in a step being undone, e.g. optimizer slots in the first step, and
        creating it again is a collective the other workers would not make).
    """
    known = {id(component) for _, component, _ in copy.saved}
    new = [
        key
        for key, leaf in leaves({"state": objects})
        if any(id(component) not in known for component in _components(leaf))
    ]
    if new:
        raise RuntimeError(
            f"ElasticHandler cannot go back to step {copy.step}: {', '.join(new)} did not exist "
            "then (created by the step being undone). Create every variable before the first "
            "step, e.g. optimizer.build(model.trainable_variables)."
        )
    for _, component, saved in copy.saved:
        _put(component, saved)
