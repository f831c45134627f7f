"""The mwms_mpi logger: the rank on every record, warnings only unless MWMS_MPI_LOG_LEVEL."""

from __future__ import annotations

import logging

import pytest

from mwms_mpi import _logging


@pytest.mark.parametrize(
    ("value", "level"),
    [("", logging.WARNING), ("info", logging.INFO), ("DEBUG", logging.DEBUG), ("15", 15),
     (" warn ", logging.WARNING), ("critical", logging.CRITICAL), ("0", logging.NOTSET)],
)  # fmt: skip
def test_level_from_env(value: str, level: int) -> None:
    assert _logging.level_from_env({_logging.LEVEL_ENV: value}) == level


@pytest.mark.parametrize("value", ["nonsense", "-1", "1.5", "Level 5", "warning!"])
def test_a_word_that_is_not_a_level_is_an_error_naming_the_variable(value: str) -> None:
    # (It used to be WARNING, silently; see tests/unit/test_env_validation.py.)
    with pytest.raises(ValueError, match=f"^Environment variable MWMS_MPI_LOG_LEVEL='{value}'"):
        _logging.level_from_env({_logging.LEVEL_ENV: value})


def test_records_carry_the_rank_and_reach_the_current_stderr(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("PMI_RANK", "3")  # MPI is not running in this process: the launcher's
    seen: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            seen.append(record)

    logger = _logging.get_logger("mwms_mpi.test_logging")
    keep = Keep()
    logger.addHandler(keep)
    try:
        logger.warning("shown %d", 1)
        logger.info("hidden")
    finally:
        logger.removeHandler(keep)
    assert [r.rank for r in seen] == ["3"]  # type: ignore[attr-defined]
    assert capsys.readouterr().err == "[mwms_mpi] rank 3: WARNING: shown 1\n"


def test_without_mpi_or_launcher_the_rank_is_a_dash(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID"):
        monkeypatch.delenv(name, raising=False)
    assert _logging.rank_text() == "-"
