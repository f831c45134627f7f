"""How the conversion pins show a result: ``"<dtype> <values>"``, or ``"ERR <class>: <message>"``
(the first line, at most 150 characters), as the TF side printed them."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import numpy as np


def show(fn: Callable[[], Any]) -> str:
    """``fn()``'s result or error as a pin shows it; a numpy bytes array is ``object``, the
    dtype TF's ``tf.string`` prints as in numpy."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # TF warns of nothing: an overflow must be an error
        try:
            result = np.asarray(fn())
        except Exception as exc:  # the type and message are what is compared
            return f"ERR {type(exc).__name__}: {str(exc).splitlines()[0][:150]}"
    dtype = "object" if result.dtype.kind == "S" else str(result.dtype)
    return f"{dtype} {result.tolist()!r}"
