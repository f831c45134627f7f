"""Environment variables, read in one place: every value checked, every error naming the variable.

Every module that is configured by an environment variable reads it through these functions and
nowhere else (``tests/unit/test_env_validation.py`` scans the package for other reads). So each
variable accepts exactly what its documentation says (``docs/launching.md``, "Environment
variables"), a typo is an error instead of a silent default (``MWMS_MPI_ABORT_ON_ERROR=maybe``
used to mean "on", ``MWMS_MPI_LOG_LEVEL=nonsense`` "warning"), and the error is a ``ValueError``
that names the variable, the value and what is allowed::

    Environment variable MWMS_MPI_STALL_WARNING='abc' is not a number >= 0 (seconds; 0 turns
    the warning off)

The rules, the same for every variable of this package:

* Unset, empty or blank means the default (``VAR= python ...`` is how a shell clears one).
* Booleans are exactly ``1``/``0``, ``true``/``false``, ``yes``/``no``, ``on``/``off``, in any
  case; integers are decimal digits with an optional sign (no ``_``, no ``0x``); numbers are
  finite.
* Variables another program sets (a launcher's ranks and sizes, Slurm's lists, ``TF_CONFIG``)
  keep that program's meaning: their one reader takes the text with :func:`env_raw` (set but
  empty is not unset there) and checks it with the ``parse_*`` functions here.

Layer 0: standard library only, no MPI. ``environ`` (default ``os.environ``, read at the call)
is a parameter of every function, so tests pass plain dicts.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

Environ = Mapping[str, str] | None
_D = TypeVar("_D")
_N = TypeVar("_N", int, float)

TRUE_WORDS = ("1", "true", "yes", "on")
FALSE_WORDS = ("0", "false", "no", "off")
BOOL_ALLOWED = "a boolean: 1, 0, true, false, yes, no, on or off, in any case"
_INTEGER = re.compile(r"[+-]?[0-9]+")


def env_raw(name: str, environ: Environ = None) -> str | None:
    """The variable's text exactly as set, or ``None`` when it is unset."""
    return (os.environ if environ is None else environ).get(name)


def child_environ(extra: Mapping[str, str]) -> dict[str, str]:
    """This process's environment with ``extra`` added: for a command this one starts."""
    return {**os.environ, **extra}


def foreign_flag(name: str, environ: Environ = None) -> bool:
    """Whether another program's variable (Open MPI's ``OMPI_MCA_*``, say) says true: read,
    never checked, since its own words are not ours to refuse."""
    value = env_str(name, environ)
    return value is not None and value.lower() in TRUE_WORDS


def env_str(name: str, environ: Environ = None) -> str | None:
    """The variable's text without surrounding blanks, or ``None`` when unset or blank."""
    value = env_raw(name, environ)
    if value is None:
        return None
    return value.strip() or None


def invalid(name: str, text: str, expected: str) -> ValueError:
    """The one error text: ``Environment variable NAME='text' is not <expected>``."""
    return ValueError(f"Environment variable {name}={text!r} is not {expected}")


def _bounds(minimum: float | None, maximum: float | None) -> str:
    if minimum is not None and maximum is not None:
        return f" in [{minimum:g}, {maximum:g}]"
    if minimum is not None:
        return f" >= {minimum:g}"
    if maximum is not None:
        return f" <= {maximum:g}"
    return ""


def _note(what: str) -> str:
    return f" ({what})" if what else ""


def parse_int(
    name: str,
    text: str,
    *,
    minimum: int | None = None,
    maximum: int | None = None,
    what: str = "",
) -> int:
    """``text`` (the value of ``name``) as a decimal integer within the bounds.

    Raises:
      ValueError: naming ``name``, ``text`` and the allowed range.
    """
    expected = f"an integer{_bounds(minimum, maximum)}{_note(what)}"
    stripped = text.strip()
    if not _INTEGER.fullmatch(stripped):
        raise invalid(name, text, expected)
    try:
        value = int(stripped)
    except ValueError:  # more digits than Python converts (sys.get_int_max_str_digits)
        raise invalid(name, text, expected) from None
    return _within(name, text, value, minimum, maximum, expected)


def parse_float(
    name: str,
    text: str,
    *,
    minimum: float | None = None,
    maximum: float | None = None,
    what: str = "",
) -> float:
    """``text`` (the value of ``name``) as a finite number within the bounds.

    Raises:
      ValueError: naming ``name``, ``text`` and the allowed range.
    """
    expected = f"a number{_bounds(minimum, maximum)}{_note(what)}"
    try:
        value = float(text) if "_" not in text else math.nan
    except ValueError:
        value = math.nan
    if not math.isfinite(value):
        raise invalid(name, text, expected)
    return _within(name, text, value, minimum, maximum, expected)


def _within(
    name: str, text: str, value: _N, minimum: float | None, maximum: float | None, expected: str
) -> _N:
    """``value``, if it lies within the bounds; else the error naming ``name``."""
    if (minimum is not None and value < minimum) or (maximum is not None and value > maximum):
        raise invalid(name, text, expected)
    return value


def parse_bool(name: str, text: str) -> bool:
    """``text`` (the value of ``name``) as a boolean word (:data:`TRUE_WORDS`, :data:`FALSE_WORDS`).

    Raises:
      ValueError: for any other word, naming ``name`` and the words allowed.
    """
    word = text.strip().lower()
    if word in TRUE_WORDS:
        return True
    if word in FALSE_WORDS:
        return False
    raise invalid(name, text, BOOL_ALLOWED)


def parse_choice(name: str, text: str, choices: Sequence[str], what: str = "") -> str:
    """The member of ``choices`` that ``text`` names, in any case.

    Raises:
      ValueError: if it names none, naming ``name`` and the choices.
    """
    word = text.strip().lower()
    for choice in choices:
        if choice.lower() == word:
            return choice
    raise invalid(name, text, f"one of {', '.join(choices)} (in any case){_note(what)}")


def env_int(
    name: str,
    default: _D,
    *,
    minimum: int | None = None,
    maximum: int | None = None,
    what: str = "",
    environ: Environ = None,
) -> int | _D:
    """The integer in ``name``, or ``default`` when it is unset or blank (see :func:`parse_int`)."""
    text = env_str(name, environ)
    if text is None:
        return default
    return parse_int(name, text, minimum=minimum, maximum=maximum, what=what)


def env_float(
    name: str,
    default: _D,
    *,
    minimum: float | None = None,
    maximum: float | None = None,
    what: str = "",
    environ: Environ = None,
) -> float | _D:
    """The number in ``name``, or ``default`` when unset or blank (see :func:`parse_float`)."""
    text = env_str(name, environ)
    if text is None:
        return default
    return parse_float(name, text, minimum=minimum, maximum=maximum, what=what)


def env_bool(name: str, default: _D, *, environ: Environ = None) -> bool | _D:
    """The boolean in ``name``, or ``default`` when it is unset or blank (see :func:`parse_bool`).

    A ``default`` of ``None`` gives three states: yes, no, and "not said".
    """
    text = env_str(name, environ)
    if text is None:
        return default
    return parse_bool(name, text)


def env_choice(
    name: str, choices: Sequence[str], default: _D, *, what: str = "", environ: Environ = None
) -> str | _D:
    """The member of ``choices`` that ``name`` names (any case), or ``default`` when unset/blank."""
    text = env_str(name, environ)
    if text is None:
        return default
    return parse_choice(name, text, choices, what)


def env_path(name: str, *, what: str = "", environ: Environ = None) -> Path | None:
    """The file path in ``name``, or ``None`` when unset or blank.

    A path is where a file will be written (or files derived from it, beside it), so one that
    names a directory is refused: an existing directory, or any text ending in a separator.
    Writing "into" ``/tmp`` would otherwise make ``/tmp.rank0`` in ``/``.

    Raises:
      ValueError: naming ``name``, if the path is a directory.
    """
    text = env_str(name, environ)
    if text is None:
        return None
    separators = tuple(s for s in (os.sep, os.altsep) if s)
    if text.endswith(separators) or Path(text).is_dir():
        example = os.path.join(text, "trace.json")
        raise invalid(
            name,
            text,
            f"a file path: it names a directory; name a file in it, such as {example!r}"
            f"{_note(what)}",
        )
    return Path(text)


def parse_json(name: str, text: str) -> Any:
    """``json.loads(text)``; a syntax error names ``name`` (and stays a ``JSONDecodeError``).

    Raises:
      json.JSONDecodeError: with ``Environment variable NAME is not JSON: <json's reason>``.
    """
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise json.JSONDecodeError(
            f"Environment variable {name} is not JSON: {exc.msg}", exc.doc, exc.pos
        ) from None
