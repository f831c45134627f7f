"""``VariableBase``: what "is a variable" means, below every module that asks.

``convert.py`` (conversion, ``is_tensor``) and ``distributed.py`` (``update_regroup``) must tell
variables from other values, but ``variables.py`` imports ``convert.py``, so they cannot import
``Variable`` itself. Every variable class (``Variable``, ``UnreadVariable`` and the distributed
variables) derives from this base, and the test is ``isinstance(value, VariableBase)``: a type,
checked by mypy, instead of a marker attribute looked up by name on any object.
"""

from __future__ import annotations

from typing import Any

__all__ = ["VariableBase"]


class VariableBase:
    """The base of every variable class: a value that is read (a fresh array) when used.

    A plain class, not an ``abc.ABC``: ``Variable``'s metaclass would have to derive from
    ``ABCMeta``, and ``isinstance`` against an ABC goes through ``__instancecheck__`` on paths
    where every value is tested (conversions, ``update_regroup``).
    """

    __slots__ = ()

    def read_value(self) -> Any:
        """Returns the variable's value in the current context (a fresh array).

        Raises:
          NotImplementedError: in a class that does not define it.
        """
        raise NotImplementedError("must be implemented in descendants")
