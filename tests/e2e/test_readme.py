"""The README's examples run as written and print what the README says they print."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.support.launch import REPO_ROOT, run_python_mpi

pytestmark = pytest.mark.timeout(120)

_EXAMPLE = re.compile(
    r"`(?P<name>[\w.]+\.py)`[^\n]*:\n\n```python\n(?P<code>.*?)```\n\n```bash\n"
    r"\.venv/bin/mpiexec -n (?P<n>\d+) \.venv/bin/python -m mwms_mpi\.run (?P=name)\n"
    r"# (?P<out>.*?)\n```",
    re.S,
)


def _examples() -> list[tuple[str, str, int, str]]:
    text = (REPO_ROOT / "README.md").read_text()
    found = [(m["name"], m["code"], int(m["n"]), m["out"]) for m in _EXAMPLE.finditer(text)]
    assert found, "the README has no runnable example in the expected form"
    return found


@pytest.mark.parametrize(("name", "code", "ranks", "expected"), _examples())
def test_readme_example(tmp_path: Path, name: str, code: str, ranks: int, expected: str) -> None:
    script = tmp_path / name
    script.write_text(code)
    temp = tmp_path / "tmp"  # each run used to leave a mkdtemp directory per rank behind
    temp.mkdir()
    result = run_python_mpi(ranks, script, timeout=60, cwd=tmp_path, env={"TMPDIR": str(temp)})
    assert result.returncode == 0, result.describe()
    assert result.stdout.strip() == expected, result.describe()
    assert sorted(p.name for p in temp.iterdir()) == [], "the example left files in $TMPDIR"
