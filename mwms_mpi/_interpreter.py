"""The check ``import mwms_mpi`` makes first: is this the interpreter of the project's venv?

The most common first mistake is the system ``python`` instead of the venv's: without it
``python hello.py`` ended in a ``ModuleNotFoundError`` for ``mpi4py`` deep inside the package,
and ``mpiexec -n 2 python -m mwms_mpi.run ...`` printed every rank's traceback, then tried to
initialise MPI to abort the job and could not. So before anything else is imported, the
package looks for its dependencies (``importlib.util.find_spec``: nothing is imported, no MPI
is touched) and, when one is missing, raises one ``ImportError`` that names the interpreter that
ran, the venv ``make install`` made (``.venv``, or the recorded MPI's: ``.venv-<mpi>``) and the
commands to use instead.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

REQUIRED = ("numpy", "mpi4py")
MPI_RECORD = ".mwms-mpi"  # the Makefile's record of `make install`'s MPI


def missing_modules() -> list[str]:
    """The required modules this interpreter cannot find."""
    return [name for name in REQUIRED if importlib.util.find_spec(name) is None]


def project_venv(package_dir: Path) -> Path | None:
    """The venv ``make install`` made for the repository holding ``package_dir``, or ``None``
    for an installed package (no repository around it)."""
    repo = package_dir.parent
    if not (repo / "Makefile").is_file() or not (repo / "setup.cfg").is_file():
        return None
    try:
        recorded = (repo / MPI_RECORD).read_text(encoding="utf-8").strip() or "mpich"
    except OSError:
        recorded = "mpich"
    return repo / (".venv" if recorded == "mpich" else f".venv-{recorded}")


def message(missing: list[str], executable: str, venv: Path | None, program: str) -> str:
    """What to tell the user: which interpreter ran, where the venv is, what to run instead."""
    lines = [
        f"mwms_mpi cannot run under {executable}: it cannot import {', '.join(missing)}.",
    ]
    if venv is None:
        lines.append(
            "Run your program with the Python of the environment mwms_mpi was installed in "
            "(with its extras: pip install 'mwms_mpi[mpich]' or your site's MPI)."
        )
        return "\n".join(lines)
    python = venv / "bin" / "python"
    if python.exists():
        lines.append(f"The project's venv is {venv}: use its Python,")
    else:
        lines.append(
            f"The project's venv would be {venv}, which does not exist yet: run `make install` "
            f"in {venv.parent} first, then use its Python,"
        )
    lines.append(f"  {python} {program}")
    lines.append(f"  {venv / 'bin' / 'mpiexec'} -n 2 {python} -m mwms_mpi.run {program}")
    lines.append("(or activate it: source " + str(venv / "bin" / "activate") + ").")
    return "\n".join(lines)


def check() -> None:
    """Raises ``ImportError`` with :func:`message` when a required module is missing."""
    missing = missing_modules()
    if not missing:
        return
    # `python prog.py`: argv[0]; `python -m mwms_mpi.run prog.py` (argv[0] is "-m" while the
    # package is imported): the first script among the arguments
    scripts = [arg for arg in sys.argv if arg.endswith(".py")]
    program = scripts[0] if scripts else "your_program.py"
    venv = project_venv(Path(__file__).resolve().parent)
    raise ImportError(message(missing, sys.executable, venv, program))
