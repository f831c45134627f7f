"""The ``mwms_mpi`` logger: the rank in every record, quiet by default, one variable to raise it.

Every module logs through ``get_logger(__name__)``, a child of the ``mwms_mpi`` logger. Each of
those loggers stamps its records with ``record.rank`` (the ``COMM_WORLD`` rank once MPI runs,
else what the launcher exported, else ``"-"``), so a handler of the user's own sees it too. The
``mwms_mpi`` logger has one handler of its own, writing ``[mwms_mpi] rank R: LEVEL: message``
to ``sys.stderr`` (whatever it is at the time), and does not propagate, so records are not
printed twice when the user configures the root logger. Only warnings and errors are shown
unless ``MWMS_MPI_LOG_LEVEL`` (``DEBUG``, ``INFO``, ``WARNING``, ``ERROR``, ``CRITICAL``, in any
case, or a number) says otherwise; any other value is an error naming it. To route the
records elsewhere: ``logging.getLogger("mwms_mpi").handlers.clear()`` and
``.propagate = True``.

Configuring a logger touches neither MPI nor the terminal, so it happens when the package is
imported.
"""

from __future__ import annotations

import contextlib
import logging
import sys

from mwms_mpi import _env, _mpi

LEVEL_ENV = "MWMS_MPI_LOG_LEVEL"
ROOT = "mwms_mpi"
FORMAT = "[mwms_mpi] rank %(rank)s: %(levelname)s: %(message)s"
# Rank variables of the common launchers (cluster/launcher.py has them all, one layer up).
_LAUNCHER_RANKS = ("OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID")
# The level names logging knows, the usual first, then its aliases.
LEVEL_NAMES = ("CRITICAL", "ERROR", "WARNING", "INFO", "DEBUG", "NOTSET")
LEVEL_ALIASES = ("FATAL", "WARN")


def rank_text() -> str:
    """This process's rank: ``COMM_WORLD``'s while MPI runs, else the launcher's, else ``-``."""
    if _mpi.is_initialized():
        MPI = _mpi.mpi()
        if not MPI.Is_finalized():
            return str(MPI.COMM_WORLD.Get_rank())
    # Only shown, never acted on, and a log record must not raise: a malformed value is skipped
    # here (cluster/launcher.py, which acts on these variables, refuses it).
    for name in _LAUNCHER_RANKS:
        value = _env.env_raw(name)
        if value is not None and value.isdigit():
            return value
    return "-"


class RankFilter(logging.Filter):
    """Adds ``record.rank`` to every record (never drops one)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not hasattr(record, "rank"):
            record.rank = rank_text()
        return True


class _StderrHandler(logging.StreamHandler):
    """Writes to ``sys.stderr`` as it is at each record (pytest and users replace it)."""

    def __init__(self) -> None:
        super().__init__(sys.stderr)

    @property
    def stream(self) -> object:
        return sys.stderr

    @stream.setter
    def stream(self, value: object) -> None:
        del value  # always sys.stderr


_FILTER = RankFilter()


def level_from_env(environ: _env.Environ = None) -> int:
    """The level ``MWMS_MPI_LOG_LEVEL`` names (``WARNING`` when unset or blank).

    Raises:
      ValueError: naming the variable, unless it is a level name (any case) or an
        integer >= 0.
    """
    text = _env.env_str(LEVEL_ENV, environ)
    if text is None:
        return logging.WARNING
    if text[-1:].isdigit():
        with contextlib.suppress(ValueError):  # else the error below, which names the levels
            return _env.parse_int(LEVEL_ENV, text, minimum=0)
    elif text.upper() in LEVEL_NAMES + LEVEL_ALIASES:
        level = logging.getLevelName(text.upper())
        if isinstance(level, int):
            return level
    raise _env.invalid(
        LEVEL_ENV,
        text,
        f"a level: one of {', '.join(LEVEL_NAMES)} (also {', '.join(LEVEL_ALIASES)}; in any "
        "case) or an integer >= 0",
    )


def configure() -> logging.Logger:
    """Sets up the ``mwms_mpi`` logger once: level, rank filter, one stderr handler."""
    logger = logging.getLogger(ROOT)
    if not any(isinstance(h, _StderrHandler) for h in logger.handlers):
        handler = _StderrHandler()
        handler.setFormatter(logging.Formatter(FORMAT))
        handler.addFilter(_FILTER)
        logger.addHandler(handler)
        logger.addFilter(_FILTER)
        logger.propagate = False
    logger.setLevel(level_from_env())
    return logger


def get_logger(name: str) -> logging.Logger:
    """The logger ``name`` (a module's ``__name__``), stamping the rank on its records."""
    logger = logging.getLogger(name)
    if _FILTER not in logger.filters:
        logger.addFilter(_FILTER)
    return logger
