"""``scripts/lint_layers.py``: import direction, cycles between modules, ranks inside
``distribute/``, module size and import-time MPI."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import types
from pathlib import Path

import pytest

from tests.support.scripts import load_script

REPO_ROOT = Path(__file__).resolve().parents[2]
SCRIPT = REPO_ROOT / "scripts" / "lint_layers.py"


def _load_linter() -> types.ModuleType:
    """Imports the standalone script as a module (``scripts/`` is not a package)."""
    return load_script("lint_layers")


lint_layers = _load_linter()

# A tree that follows every rule, including the allowed corner cases.
CLEAN_TREE = {
    "__init__.py": """
        from mwms_mpi import errors
        from mwms_mpi.distribute import strategy
        from .run import main
        import mwms_mpi.values.variables
    """,
    "errors.py": "class OpError(Exception):\n    pass\n",
    "types.py": "from mwms_mpi import errors\nfrom . import errors as e\n",
    "_mpi.py": """
        def mpi():
            from mpi4py import MPI
            return MPI
    """,
    "cluster/__init__.py": "from .spec import ClusterSpec\n",
    "cluster/spec.py": """
        from ..errors import OpError
        from mwms_mpi import types
        from . import resolver
        class ClusterSpec:
            pass
    """,
    "cluster/resolver.py": "import mwms_mpi.errors\n",
    "collective/__init__.py": "",
    "collective/communicator.py": """
        from __future__ import annotations
        from typing import TYPE_CHECKING
        import mpi4py
        from mpi4py import rc
        from mwms_mpi.cluster import spec
        if TYPE_CHECKING:
            from mpi4py import MPI
        else:
            pass
        class Communicator:
            def __init__(self) -> None:
                from mpi4py import MPI
                self.comm = MPI.COMM_WORLD.Dup()
            def later(self):
                return lambda: __import__("mpi4py.MPI")
    """,
    "values/__init__.py": "",
    "values/variables.py": "from ..collective import communicator\n",
    "data/__init__.py": "from mwms_mpi.cluster import spec\n",
    "distribute/__init__.py": "",
    "distribute/strategy.py": """
        from typing import TYPE_CHECKING
        from . import extended
        from ..values import variables
        from ..data import *
        from ..train import checkpoint
    """,
    "distribute/cluster_resolver/__init__.py": "from ...cluster import spec\n",
    "distribute/_types.py": "from typing import Protocol\nclass StrategyProtocol(Protocol): ...\n",
    "distribute/extended.py": """
        from mwms_mpi.distribute._types import StrategyProtocol
        from mwms_mpi.distribute import cluster_resolver
    """,
    "train/__init__.py": "",
    "train/checkpoint.py": "from mwms_mpi.values import variables\n",
    "optimizers/__init__.py": "from ..distribute import strategy\n",
    "run.py": """
        def main():
            from mwms_mpi import _mpi
            from mwms_mpi.distribute import strategy
    """,
}


REAL_RANKS = dict(lint_layers.DISTRIBUTE_RANKS)
# The ranks the trees below are checked against (the real table is the package's).
TEST_RANKS = {"_types": 0, "cluster_resolver": 0, "extended": 1, "strategy": 2}


@pytest.fixture(autouse=True)
def _test_ranks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Checks the trees of these tests against :data:`TEST_RANKS`."""
    monkeypatch.setattr(lint_layers, "DISTRIBUTE_RANKS", TEST_RANKS)


def write_tree(root: Path, files: dict[str, str]) -> Path:
    """Writes ``files`` (relative path -> dedented source) under ``root/mwms_mpi``."""
    package = root / "mwms_mpi"
    for relative, source in files.items():
        path = package / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(source).lstrip())
    return package


def violations_with(tmp_path: Path, cycles: bool = True, **overrides: str) -> list[str]:
    """Lints the clean tree with some files replaced or added (``cluster__spec`` or
    ``cluster/spec`` = cluster/spec.py).

    Returns the violations as ``relative/path:line: message`` strings; without the import
    cycles when ``cycles`` is false (an upward import usually closes one too).
    """
    files = dict(CLEAN_TREE)
    files.update(
        ((name if "/" in name else name.replace("__", "/")) + ".py", src)
        for name, src in overrides.items()
    )
    package = write_tree(tmp_path, files)
    return [
        f"{v.path.relative_to(package).as_posix()}:{v.line}: {v.message}"
        for v in lint_layers.lint(package)
        if cycles or not v.message.startswith("import cycle:")
    ]


def test_clean_tree_passes(tmp_path: Path) -> None:
    assert violations_with(tmp_path) == []


def test_upward_relative_import_is_caught(tmp_path: Path) -> None:
    found = violations_with(tmp_path, cluster__spec="import os\nfrom ..collective import x\n")

    assert len(found) == 1
    assert found[0].startswith("cluster/spec.py:2: upward import: mwms_mpi.cluster.spec")
    assert "(layer 1, cluster) imports mwms_mpi.collective (layer 2, collective)" in found[0]


def test_upward_import_inside_a_function_is_caught(tmp_path: Path) -> None:
    source = """
        def lazy():
            import mwms_mpi.distribute.strategy
    """
    found = violations_with(tmp_path, cycles=False, errors=source)

    assert len(found) == 1
    assert found[0].startswith("errors.py:2: upward import: mwms_mpi.errors (layer 0, errors)")


def test_level_zero_modules_may_not_import_cluster(tmp_path: Path) -> None:
    found = violations_with(tmp_path, nest="from mwms_mpi import cluster\n")

    assert found == [
        "nest.py:1: upward import: mwms_mpi.nest (layer 0, nest) imports mwms_mpi.cluster "
        "(layer 1, cluster); imports must run down the layers of docs/architecture.md"
    ]


def test_upward_import_under_type_checking_is_caught(tmp_path: Path) -> None:
    source = """
        from typing import TYPE_CHECKING
        if TYPE_CHECKING:
            from mwms_mpi.distribute.strategy import Strategy
    """
    found = violations_with(tmp_path, cycles=False, values__variables=source)

    assert len(found) == 1
    assert found[0].startswith("values/variables.py:3: upward import")


def test_values_and_data_must_not_import_each_other(tmp_path: Path) -> None:
    found = violations_with(
        tmp_path,
        cycles=False,
        values__variables="from ..data import dataset\n",
        data__dataset="from mwms_mpi.values import variables\n",
    )

    assert found == [
        "data/dataset.py:1: data and values must not import each other: mwms_mpi.values",
        "values/variables.py:1: values and data must not import each other: mwms_mpi.data",
    ]


def test_importing_the_package_top_from_inside_is_caught(tmp_path: Path) -> None:
    found = violations_with(
        tmp_path,
        cycles=False,
        distribute__strategy="import mwms_mpi\nfrom mwms_mpi import Variable\n",
    )

    assert len(found) == 2
    assert all("imports the package top" in line for line in found)
    assert found[1].startswith("distribute/strategy.py:2:")


def test_relative_import_beyond_the_package_is_caught(tmp_path: Path) -> None:
    found = violations_with(tmp_path, cluster__spec="from ... import elsewhere\n")

    assert found == ["cluster/spec.py:1: relative import beyond the package"]


def test_module_without_a_layer_is_caught(tmp_path: Path) -> None:
    found = violations_with(tmp_path, extras="x = 1\n")

    assert found == [
        "extras.py:1: 'extras' has no layer; add it to LAYERS in scripts/lint_layers.py "
        '(and to docs/architecture.md, "Layers")'
    ]


def test_long_module_is_caught(tmp_path: Path) -> None:
    limit = lint_layers.MAX_LINES
    at_limit = "x = 1\n" * limit
    assert violations_with(tmp_path, nest=at_limit) == []

    found = violations_with(tmp_path, nest=at_limit + "y = 2\n")
    assert found == [f"nest.py:{limit + 1}: {limit + 1} lines; modules stay <= {limit}"]


def test_lazy_import_cycle_is_caught(tmp_path: Path) -> None:
    source = """
        import mwms_mpi.errors
        def later():
            from mwms_mpi.cluster import spec
    """
    found = violations_with(tmp_path, cluster__resolver=source)

    assert found == [
        "cluster/resolver.py:3: import cycle: mwms_mpi.cluster.resolver -> mwms_mpi.cluster.spec"
        " -> mwms_mpi.cluster.resolver (imports at mwms_mpi.cluster.resolver:3 lazy, "
        "mwms_mpi.cluster.spec:3)"
    ]


def test_type_checking_cycle_is_caught(tmp_path: Path) -> None:
    source = """
        from typing import TYPE_CHECKING
        if TYPE_CHECKING:
            from .spec import ClusterSpec
    """
    found = violations_with(tmp_path, cluster__resolver=source)

    assert found == [
        "cluster/resolver.py:3: import cycle: mwms_mpi.cluster.resolver -> mwms_mpi.cluster.spec"
        " -> mwms_mpi.cluster.resolver (imports at mwms_mpi.cluster.resolver:3 type-only, "
        "mwms_mpi.cluster.spec:3)"
    ]


def test_submodule_importing_its_own_package_init_is_a_cycle(tmp_path: Path) -> None:
    # cluster/__init__ re-exports spec, which imports resolver: no cycle (the clean tree) until
    # resolver takes a name from the package's __init__ itself.
    found = violations_with(tmp_path, cluster__resolver="from . import ClusterSpec\n")

    assert found == [
        "cluster/__init__.py:1: import cycle: mwms_mpi.cluster -> mwms_mpi.cluster.spec -> "
        "mwms_mpi.cluster.resolver -> mwms_mpi.cluster (imports at mwms_mpi.cluster:1, "
        "mwms_mpi.cluster.spec:3, mwms_mpi.cluster.resolver:1)"
    ]


def test_importing_a_submodule_runs_its_package_init(tmp_path: Path) -> None:
    # As train/checkpoint importing mwms_mpi.distribute.<module> ran distribute/__init__.py.
    found = violations_with(
        tmp_path,
        **{
            "distribute/__init__": "from mwms_mpi.train import checkpoint\n",
            "train/checkpoint": "from mwms_mpi.distribute._types import StrategyProtocol\n",
        },
    )

    assert found == [
        "distribute/__init__.py:1: import cycle: mwms_mpi.distribute -> mwms_mpi.train.checkpoint"
        " -> mwms_mpi.distribute (imports at mwms_mpi.distribute:1, mwms_mpi.train.checkpoint:1)"
    ]


def test_rank_violation_inside_distribute_is_caught(tmp_path: Path) -> None:
    found = violations_with(tmp_path, distribute___types="from . import cluster_resolver\n")

    assert found == [
        "distribute/_types.py:1: rank violation: mwms_mpi.distribute._types (rank 0) imports "
        "mwms_mpi.distribute.cluster_resolver (rank 0); a distribute module imports only lower "
        "ranks (DISTRIBUTE_RANKS in scripts/lint_layers.py)"
    ]


def test_type_only_import_of_a_higher_rank_is_caught(tmp_path: Path) -> None:
    source = """
        from typing import TYPE_CHECKING
        from mwms_mpi.distribute._types import StrategyProtocol
        if TYPE_CHECKING:
            from mwms_mpi.distribute.strategy import Strategy
    """
    found = violations_with(tmp_path, cycles=False, distribute__extended=source)

    assert found == [
        "distribute/extended.py:4: rank violation: mwms_mpi.distribute.extended (rank 1) imports "
        "mwms_mpi.distribute.strategy (rank 2) (type-only); a distribute module imports only "
        "lower ranks (DISTRIBUTE_RANKS in scripts/lint_layers.py)"
    ]


def test_distribute_module_without_a_rank_is_caught(tmp_path: Path) -> None:
    found = violations_with(tmp_path, distribute__helpers="x = 1\n")

    assert found == [
        "distribute/helpers.py:1: mwms_mpi.distribute.helpers has no rank; add 'helpers' to "
        "DISTRIBUTE_RANKS in scripts/lint_layers.py"
    ]


def test_real_rank_table_lists_every_distribute_module() -> None:
    package = REPO_ROOT / "mwms_mpi" / "distribute"
    children = {p.stem for p in package.glob("*.py") if p.stem != "__init__"}
    children |= {p.name for p in package.iterdir() if (p / "__init__.py").is_file()}

    assert set(REAL_RANKS) == children


@pytest.mark.parametrize(
    "source",
    [
        "from mpi4py import MPI\n",
        "import mpi4py.MPI\n",
        "import mpi4py.MPI as MPI\n",
        "from mpi4py.MPI import COMM_WORLD\n",
        "from mpi4py import rc, MPI\n",
        "try:\n    from mpi4py import MPI\nexcept ImportError:\n    pass\n",
        "class Lazy:\n    from mpi4py import MPI\n",
        "if True:\n    import mpi4py.MPI\n",
    ],
)
def test_import_time_mpi_is_caught(tmp_path: Path, source: str) -> None:
    found = violations_with(tmp_path, collective__communicator=source)

    assert len(found) == 1
    assert found[0].startswith("collective/communicator.py:")
    assert "import-time MPI" in found[0]


def test_syntax_error_is_reported(tmp_path: Path) -> None:
    found = violations_with(tmp_path, nest="def broken(:\n")

    assert len(found) == 1
    assert found[0].startswith("nest.py:1: syntax error")


def test_main_prints_path_line_message_and_exits_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    files = dict(CLEAN_TREE, **{"cluster/spec.py": "from mwms_mpi.testing import main\n"})
    package = write_tree(tmp_path, files)

    assert lint_layers.main([str(package)]) == 1
    out, err = capsys.readouterr()
    assert f"{package / 'cluster' / 'spec.py'}:1: upward import" in out
    assert "1 violation(s)" in err


def test_main_on_clean_tree_exits_0(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    package = write_tree(tmp_path, CLEAN_TREE)

    assert lint_layers.main([str(package)]) == 0
    assert "modules OK" in capsys.readouterr().out


def test_main_refuses_a_directory_that_is_not_a_package(tmp_path: Path) -> None:
    assert lint_layers.main([str(tmp_path)]) == 2


def test_script_runs_standalone(tmp_path: Path) -> None:
    package = write_tree(tmp_path, dict(CLEAN_TREE, **{"types.py": "import mwms_mpi.run\n"}))
    result = subprocess.run(
        [sys.executable, str(SCRIPT), str(package)],
        capture_output=True,
        text=True,
        timeout=60,
    )

    assert result.returncode == 1, result.stderr
    assert "types.py:1: upward import" in result.stdout


def test_real_package_passes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.undo()  # the package's own ranks
    violations = lint_layers.lint(REPO_ROOT / "mwms_mpi")

    assert violations == [], "\n".join(map(str, violations))
