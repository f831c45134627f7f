"""``iter(dataset)``: TF's ``OwnedIterator`` over a dataset's elements."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from mwms_mpi import errors


class OwnedIterator:
    """An iterator over a dataset, as ``iter(dataset)`` returns it in TF."""

    def __init__(self, element_spec: Any, elements: Iterator[Any]) -> None:
        self._element_spec = element_spec
        self._elements = elements

    @property
    def element_spec(self) -> Any:
        """The type specification of an element of this iterator."""
        return self._element_spec

    def __iter__(self) -> OwnedIterator:
        return self

    def __next__(self) -> Any:
        return next(self._elements)

    def get_next(self) -> Any:
        """Returns the next element.

        Raises:
          OutOfRangeError: the end of the sequence is reached.
        """
        try:
            return next(self._elements)
        except StopIteration:
            raise errors.OutOfRangeError(None, "IteratorGetNext", "End of sequence") from None
