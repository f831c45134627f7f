"""``iter(dataset)``: TF's ``OwnedIterator`` over a dataset's elements."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from mwms_mpi import errors
from mwms_mpi.data._optional import Optional


class OwnedIterator:
    """An iterator over a dataset, as ``iter(dataset)`` returns it in TF.

    TF's iterator goes on after an element's error (a ``map`` function that raised for one
    element): the next call returns the next element. Ours cannot, since the pipeline's
    generators end at an exception; rather than end silently (a loop that catches the error
    and goes on would see the data end early), every later call raises ``UnimplementedError``
    naming the first error.
    """

    def __init__(self, element_spec: Any, elements: Iterator[Any]) -> None:
        self._element_spec = element_spec
        self._elements = elements
        self._failed: Exception | None = None

    def _next(self) -> Any:
        """The next element; ``StopIteration`` at the end."""
        if self._failed is not None:
            raise errors.UnimplementedError(
                None,
                "IteratorGetNext",
                "this iterator raised an error for an element before "
                f"({type(self._failed).__name__}: {self._failed}); TF's iterator goes on with "
                "the next element, mwms_mpi's cannot. Make a new iterator, or keep the "
                "elements that fail out of the pipeline (a filter before the failing step).",
            ) from self._failed
        try:
            return next(self._elements)
        except StopIteration:
            raise
        except Exception as exc:
            self._failed = exc
            raise

    @property
    def element_spec(self) -> Any:
        """The type specification of an element of this iterator."""
        return self._element_spec

    def __iter__(self) -> OwnedIterator:
        return self

    def __next__(self) -> Any:
        return self._next()

    def get_next(self) -> Any:
        """Returns the next element.

        Raises:
          OutOfRangeError: the end of the sequence is reached.
        """
        try:
            return self._next()
        except StopIteration:
            raise errors.OutOfRangeError(None, "IteratorGetNext", "End of sequence") from None

    def get_next_as_optional(self) -> Optional:
        """Returns the next element as an ``Optional``, empty at the end of the sequence.

        Its ``element_spec`` is the iterator's, not the value's, as TF's (the default
        strategy's distributed iterator is this one).
        """
        try:
            return Optional(self._next(), True, self._element_spec)
        except StopIteration:
            return Optional.empty(self._element_spec)
