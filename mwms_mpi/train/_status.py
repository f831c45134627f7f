"""What ``Checkpoint.restore`` returns, and ``save_counter``: small objects with TF's methods."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from mwms_mpi.train._restore import Restoration
from mwms_mpi.train._walk import pretty

# -- load statuses -------------------------------------------------------------------------------


class CheckpointLoadStatus:
    """Checks the status of checkpoint loading (what ``Checkpoint.restore`` returns).

    As in TF, the checks look at the objects as they are when called: values kept for objects
    not created yet (restore-on-create) count as consumed once those objects exist.

    Args:
      restoration: the restore's values and which of them were assigned.
      current: returns ``(key, leaf)`` for every variable or array under the checkpoint now.
    """

    def __init__(
        self, restoration: Restoration, current: Callable[[], Iterable[tuple[str, Any]]]
    ) -> None:
        self._restoration = restoration
        self._current = current

    def assert_consumed(self) -> CheckpointLoadStatus:
        """Asserts that all objects in the checkpoint have been created/matched.

        Raises:
          AssertionError: if an object matched no value in the checkpoint, or a value in the
            checkpoint has no object (yet).
        """
        self.assert_existing_objects_matched()
        unused = self._restoration.unused()
        if unused:
            arrays = self._restoration.arrays
            raise AssertionError(
                "\n".join(
                    f"Unresolved object in checkpoint {pretty(key)}: {key} "
                    f"({arrays[key].dtype}{list(arrays[key].shape)} in {self._restoration.path})"
                    for key in unused
                )
            )
        return self

    def assert_existing_objects_matched(self) -> CheckpointLoadStatus:
        """Asserts that trackable Python objects have been matched.

        Values of objects not created yet do not count: build them, then ``assert_consumed``.

        Raises:
          AssertionError: if an existing object matched no value in the checkpoint.
        """
        restoration = self._restoration
        unmatched = [
            (key, leaf) for key, leaf in self._current() if not restoration.has_matched(key, leaf)
        ]
        if unmatched:
            shown = unmatched[:10]
            raise AssertionError(
                f"Found {len(unmatched)} Python objects that were not bound to checkpointed "
                "values, likely due to changes in the Python program. Showing "
                f"{len(shown)} of {len(unmatched)} unmatched objects: "
                f"{[f'{pretty(key)}: {_describe(leaf)}' for key, leaf in shown]}"
            )
        return self

    def assert_nontrivial_match(self) -> CheckpointLoadStatus:
        """Raises an exception if only the root object matched.

        Raises:
          AssertionError: if no value (``save_counter`` included, as in TF) found its object.
        """
        if not self._restoration.matched:
            unmatched = [pretty(key) for key, _ in self._current() if key != "save_counter"]
            if unmatched:
                raise AssertionError(
                    "Nothing except the root object matched a checkpointed value. Typically "
                    "this means that the checkpoint does not match the Python program. The "
                    f"following objects have no matching checkpointed value: {unmatched}"
                )
            raise AssertionError("Nothing to load. No dependencies have been added to the root.")
        return self

    def expect_partial(self) -> CheckpointLoadStatus:
        """Silence warnings about incomplete checkpoint restores."""
        self._restoration.expect_partial()
        return self

    def initialize_or_restore(self, session: Any = None) -> None:
        """Nothing to run: values are restored eagerly (or when their object is created)."""

    def run_restore_ops(self, session: Any = None) -> None:
        """Nothing to run: values are restored eagerly (or when their object is created)."""


def _describe(leaf: Any) -> str:
    if isinstance(leaf, np.ndarray):
        return f"ndarray {leaf.dtype}{list(leaf.shape)}"
    return repr(leaf)


class InitializationOnlyStatus:
    """What ``restore(None)`` returns: nothing is restored, every assertion fails."""

    def assert_consumed(self) -> InitializationOnlyStatus:
        """Raises AssertionError: nothing is being restored."""
        raise AssertionError("No checkpoint specified (save_path=None); nothing is being restored.")

    def assert_existing_objects_matched(self) -> InitializationOnlyStatus:
        """Raises AssertionError: nothing is being restored."""
        return self.assert_consumed()

    def assert_nontrivial_match(self) -> InitializationOnlyStatus:
        """Raises AssertionError: nothing is being restored."""
        return self.assert_consumed()

    def expect_partial(self) -> InitializationOnlyStatus:
        """Nothing to silence."""
        return self

    def initialize_or_restore(self, session: Any = None) -> None:
        """Nothing to run: variables keep their initial values."""

    def run_restore_ops(self, session: Any = None) -> None:
        """Nothing to run."""


# -- the save counter ----------------------------------------------------------------------------


class SaveCounter:
    """``Checkpoint.save_counter``: an int64 scalar with the variable protocol (never a collective).

    Every worker calls ``save`` equally often, so the counters agree without communication.
    """

    # TF's save_counter is a tf.Variable: int64, shape (), named, not trainable
    dtype = np.dtype(np.int64)
    shape = ()
    name = "save_counter:0"
    trainable = False

    def __init__(self, value: int = 0) -> None:
        self._value = np.int64(value)

    def numpy(self) -> np.int64:
        """The count as a numpy int64 scalar."""
        return np.int64(self._value)

    def read_value(self) -> np.ndarray:
        """The count as a 0-d int64 array."""
        return np.array(self._value, dtype=np.int64)

    def assign(self, value: Any) -> SaveCounter:
        """Sets the count."""
        self._value = np.int64(np.asarray(value))
        return self

    def assign_add(self, delta: Any) -> SaveCounter:
        """Adds ``delta`` to the count."""
        self._value = np.int64(self._value + np.int64(np.asarray(delta)))
        return self

    def __int__(self) -> int:
        return int(self._value)

    def __index__(self) -> int:
        return int(self._value)

    def __repr__(self) -> str:
        return f"<mwms_mpi.Variable 'save_counter:0' shape=() dtype=int64, numpy={int(self)}>"
