"""``iter(dataset)``: TF's ``OwnedIterator`` over a dataset's elements."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from mwms_mpi import errors
from mwms_mpi.data._optional import Optional


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

    def get_next_as_optional(self) -> Optional:
        """Returns the next element as an ``Optional``, empty at the end of the sequence.

        Its ``element_spec`` is the iterator's, not the value's, as TF's (the default
        strategy's distributed iterator is this one).
        """
        try:
            return Optional(next(self._elements), True, self._element_spec)
        except StopIteration:
            return Optional.empty(self._element_spec)
