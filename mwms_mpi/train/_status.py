"""What ``Checkpoint.restore`` returns, and ``save_counter``: small objects with TF's methods."""

from __future__ import annotations

from typing import Any

import numpy as np

# -- load statuses -------------------------------------------------------------------------------


class CheckpointLoadStatus:
    """Checks the status of checkpoint loading (what ``Checkpoint.restore`` returns).

    Every value is restored when ``restore`` returns (there is no deferred restoration), so the
    checks below only report what matched.
    """

    def __init__(self, path: str, unused_keys: list[str], unmatched: list[str]) -> None:
        self._path = path
        self._unused_keys = unused_keys
        self._unmatched = unmatched

    def assert_consumed(self) -> CheckpointLoadStatus:
        """Asserts that all objects in the checkpoint have been created/matched.

        Raises:
          AssertionError: if a value in the checkpoint matched no object, or an object matched
            no value in the checkpoint.
        """
        if self._unused_keys:
            raise AssertionError(
                f"Unresolved object in checkpoint {self._path}: {', '.join(self._unused_keys)}"
            )
        return self.assert_existing_objects_matched()

    def assert_existing_objects_matched(self) -> CheckpointLoadStatus:
        """Asserts that trackable Python objects have been matched.

        Raises:
          AssertionError: if an object matched no value in the checkpoint.
        """
        if self._unmatched:
            raise AssertionError(
                f"Found {len(self._unmatched)} Python objects that were not bound to "
                "checkpointed values, likely due to changes in the Python program. Showing "
                f"{len(self._unmatched)} of {len(self._unmatched)} unmatched objects: "
                f"{self._unmatched}"
            )
        return self

    def assert_nontrivial_match(self) -> CheckpointLoadStatus:
        """Raises an exception if only the root object matched."""
        return self

    def expect_partial(self) -> CheckpointLoadStatus:
        """Silence warnings about incomplete checkpoint restores."""
        return self

    def initialize_or_restore(self, session: Any = None) -> None:
        """Nothing to run: values were restored eagerly."""

    def run_restore_ops(self, session: Any = None) -> None:
        """Nothing to run: values were restored eagerly."""


class InitializationOnlyStatus(CheckpointLoadStatus):
    """What ``restore(None)`` returns: nothing is restored, every assertion fails."""

    def __init__(self) -> None:
        super().__init__("", [], [])

    def assert_consumed(self) -> CheckpointLoadStatus:
        """Raises AssertionError: nothing is being restored."""
        raise AssertionError("No checkpoint specified (save_path=None); nothing is being restored.")

    def assert_existing_objects_matched(self) -> CheckpointLoadStatus:
        """Raises AssertionError: nothing is being restored."""
        return self.assert_consumed()

    def assert_nontrivial_match(self) -> CheckpointLoadStatus:
        """Raises AssertionError: nothing is being restored."""
        return self.assert_consumed()


# -- the save counter ----------------------------------------------------------------------------


class SaveCounter:
    """``Checkpoint.save_counter``: an int64 scalar with the variable protocol (never a collective).

    Every worker calls ``save`` equally often, so the counters agree without communication.
    """

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
