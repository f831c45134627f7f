#!/usr/bin/env python3
"""Checks mwms_mpi's layers (docs/architecture.md): import direction, import cycles between
modules, ranks inside distribute/, module size, import-time MPI.

Run by ``make lint``; stdlib only. Rules:

1. Imports run one way. Each top-level module or subpackage of the package has a layer::

       0  errors types nest _context _mpi _constant _autopack _graph_constant _lifecycle
             _config config _logging _failure_report _arrays _env _naming _name_scope _tf_text
       1  cluster
       2  collective
       3  values data          (values and data must not import each other)
       4  distribute train optimizers metrics nn
       5  run cli testing __main__

   A module may import only modules at its own layer or below. The package's ``__init__.py``
   is the re-export top and may import anything; nothing inside the package may import the
   package top itself (``from mwms_mpi import Variable`` would run every layer's imports).
   Imports anywhere count: inside functions and under ``if TYPE_CHECKING`` too, so "lazy"
   imports cannot hide a cycle. A module not listed above is an error until it is given a layer.
2. No import cycle between modules (``scripts/_import_graph.py`` builds the module graph: every
   import anywhere in a module, lazy and type-only ones too; importing a submodule also runs the
   ``__init__`` of each package above it, except the importer's own packages). Each cycle is
   printed as ``a -> b -> ... -> a`` at the file and line of its first import.
3. Inside ``distribute/`` each module (or subpackage) has a rank in :data:`DISTRIBUTE_RANKS`
   and may import only ``distribute`` modules of a lower rank; an unranked module is an error.
   ``distribute/__init__.py`` is its re-export top: it may import them all, none may import it.
4. No module longer than :data:`MAX_LINES` lines.
5. No import-time MPI: ``from mpi4py import MPI`` / ``import mpi4py.MPI`` only inside functions
   (importing ``mpi4py.MPI`` initialises MPI; ``_mpi.py`` is the accessor). Imports under
   ``if TYPE_CHECKING:`` never run and are allowed.

Usage: ``python scripts/lint_layers.py [PACKAGE_DIR]`` (default: the repository's ``mwms_mpi``).
Prints ``path:line: message`` per violation and exits 1 if there is any.
"""

from __future__ import annotations

import argparse
import ast
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

_SCRIPTS = str(Path(__file__).resolve().parent)
if _SCRIPTS not in sys.path:  # loaded by file path (the unit tests) rather than run as a script
    sys.path.insert(0, _SCRIPTS)

from _import_graph import (  # noqa: E402  (needs the path above)
    Graph,
    Module,
    describe,
    discover,
    is_type_checking,
    resolve_base,
)

LAYERS: dict[str, int] = {
    "errors": 0,
    "types": 0,
    "nest": 0,
    "_context": 0,
    "_mpi": 0,
    "_constant": 0,
    "_autopack": 0,
    "_graph_constant": 0,
    "_lifecycle": 0,
    "_config": 0,
    "config": 0,
    "_logging": 0,
    "_failure_report": 0,
    "_arrays": 0,
    "_tf_sum": 0,
    "_env": 0,
    "_interpreter": 0,
    "_naming": 0,
    "_name_scope": 0,
    "_tf_text": 0,
    "cluster": 1,
    "collective": 2,
    "values": 3,
    "data": 3,
    "distribute": 4,
    "train": 4,
    "optimizers": 4,
    "metrics": 4,
    "nn": 4,
    "run": 5,
    "cli": 5,
    "testing": 5,
    "__main__": 5,
}
# Ranks inside RANKED (mwms_mpi/distribute/): a module there may import only modules of RANKED
# with a lower rank, so its modules stay a stack (docs/architecture.md, "Layers"). Keys are the
# direct children of RANKED: a module, or a subpackage with everything in it. Its __init__ is
# the re-export top, above every rank: it may import any of them, none of them may import it.
RANKED = "distribute"
DISTRIBUTE_RANKS: dict[str, int] = {
    # leaves: the strategy's types, input options, helpers; no distribute imports
    "_types": 0,
    "input_context": 0,
    "input_spec": 0,
    "gpus": 0,
    "cross_device_utils": 0,
    "deprecated": 0,
    "multi_step": 0,
    "cluster_resolver": 0,
    "_state_copy": 0,
    "_reduce_sum": 0,
    # cross-device reductions and input pipelines, below any strategy class
    "cross_device_ops": 1,
    "input_lib": 1,
    "variable_creation": 1,
    "collective_ops": 2,
    "replica_context": 2,
    "strategy_extended": 3,
    "mirrored_run": 3,
    # the strategy classes, then what is built on them
    "distribute_lib": 4,
    "context": 5,
    "mirrored_strategy": 6,
    "collective_all_reduce_strategy": 7,
    "failure_handling": 8,
    "elastic": 8,
    "experimental": 9,
}
# Same-layer pairs that must stay independent: (importer, imported).
FORBIDDEN_PAIRS = frozenset({("values", "data"), ("data", "values")})
TOP = "__init__"  # the package's own __init__.py: the re-export top
MAX_LINES = 500

DEFAULT_PACKAGE = Path(__file__).resolve().parent.parent / "mwms_mpi"


@dataclass(frozen=True)
class Violation:
    """One broken rule at a place in a file."""

    path: Path
    line: int
    message: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.message}"


def layer_key(module: Module) -> str:
    """``cluster`` for ``mwms_mpi.cluster.spec``; :data:`TOP` for the package's __init__."""
    parts = module.name.split(".")
    return parts[1] if len(parts) > 1 else TOP


def top_level_names(package_dir: Path) -> frozenset[str]:
    """Names of the package's direct submodules and subpackages (for ``from pkg import x``)."""
    names = {p.stem for p in package_dir.glob("*.py") if p.stem != "__init__"}
    names |= {p.name for p in package_dir.iterdir() if (p / "__init__.py").is_file()}
    return frozenset(names)


@dataclass(frozen=True)
class ImportSite:
    """An import statement's target inside the package, as a layer key, and where it is."""

    key: str
    line: int
    text: str  # the imported dotted name, for the message


def package_imports(
    module: Module, tree: ast.AST, root: str, submodules: frozenset[str]
) -> Iterator[ImportSite | Violation]:
    """Every import of the package's own modules in ``tree`` (anywhere in it), as layer keys."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                site = _site(alias.name, root, node.lineno)
                if site is not None:
                    yield site
        elif isinstance(node, ast.ImportFrom):
            base = resolve_base(module, node)
            if base is None:
                yield Violation(module.path, node.lineno, "relative import beyond the package")
                continue
            if base == root:  # from mwms_mpi import x: x may be a submodule or a name in TOP
                for alias in node.names:
                    key = alias.name if alias.name in submodules else TOP
                    yield ImportSite(key, node.lineno, f"{root}.{alias.name}")
            else:
                site = _site(base, root, node.lineno)
                if site is not None:
                    yield site


def _site(dotted: str, root: str, line: int) -> ImportSite | None:
    """The layer key of ``dotted`` if it is inside the package ``root``, else None."""
    parts = dotted.split(".")
    if parts[0] != root:
        return None
    return ImportSite(parts[1] if len(parts) > 1 else TOP, line, dotted)


def check_direction(module: Module, site: ImportSite) -> str | None:
    """Why ``module`` may not import ``site``, or None if it may."""
    if layer_key(module) == TOP or site.key == layer_key(module):
        return None
    if site.key == TOP:
        return f"{module.name} imports the package top ({site.text}); import the defining module"
    importer, imported = LAYERS.get(layer_key(module)), LAYERS.get(site.key)
    if importer is None or imported is None:
        return None  # reported once per module by check_module
    if imported > importer:
        return (
            f"upward import: {module.name} (layer {importer}, {layer_key(module)}) imports "
            f"{site.text} (layer {imported}, {site.key}); imports must run down the layers of "
            "docs/architecture.md"
        )
    if (layer_key(module), site.key) in FORBIDDEN_PAIRS:
        return f"{layer_key(module)} and {site.key} must not import each other: {site.text}"
    return None


def rank_key(name: str) -> str | None:
    """The :data:`DISTRIBUTE_RANKS` key of the module ``name``; :data:`TOP` for RANKED's
    ``__init__``; None outside RANKED."""
    parts = name.split(".")
    if len(parts) < 2 or parts[1] != RANKED:
        return None
    return parts[2] if len(parts) > 2 else TOP


def check_ranks(graph: Graph) -> Iterator[Violation]:
    """Imports inside RANKED that do not go to a lower rank; RANKED modules with no rank."""
    for name, module in graph.modules.items():
        key = rank_key(name)
        if key is None or key == TOP:
            continue
        rank = DISTRIBUTE_RANKS.get(key)
        if rank is None:
            yield Violation(
                module.path,
                1,
                f"{name} has no rank; add {key!r} to DISTRIBUTE_RANKS in scripts/lint_layers.py",
            )
            continue
        for edge in graph.edges[name].values():
            target = rank_key(edge.target)
            if target is None or target == key:
                continue
            imported = DISTRIBUTE_RANKS.get(target)
            if target != TOP and imported is None:
                continue  # reported once, at the unranked module
            kind = "" if edge.kind == "import" else f" ({edge.kind})"
            where = f"the top of {RANKED}" if imported is None else f"rank {imported}"
            if imported is None or imported >= rank:
                yield Violation(
                    module.path,
                    edge.line,
                    f"rank violation: {name} (rank {rank}) imports {edge.target} "
                    f"({where}){kind}; a {RANKED} module imports only lower ranks "
                    "(DISTRIBUTE_RANKS in scripts/lint_layers.py)",
                )


def import_time_mpi(module: Module, tree: ast.Module) -> Iterator[Violation]:
    """``mpi4py.MPI`` imports that run at import time (outside any function)."""
    for node, in_function in _walk_scoped(tree, False):
        if not in_function and isinstance(node, ast.Import | ast.ImportFrom) and _imports_mpi(node):
            yield Violation(
                module.path,
                node.lineno,
                "import-time MPI: importing mpi4py.MPI initialises MPI; import it inside a "
                "function (use mwms_mpi._mpi.mpi())",
            )


_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)


def _walk_scoped(node: ast.AST, in_function: bool) -> Iterator[tuple[ast.AST, bool]]:
    """All nodes with whether a function encloses them; ``if TYPE_CHECKING:`` bodies skipped."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.If) and is_type_checking(child.test):
            for other in child.orelse:
                yield other, in_function
                yield from _walk_scoped(other, in_function)
            continue
        yield child, in_function
        inner = in_function or isinstance(
            child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda
        )
        yield from _walk_scoped(child, inner)


def _imports_mpi(node: ast.Import | ast.ImportFrom) -> bool:
    """Whether ``node`` imports ``mpi4py.MPI`` (which initialises MPI)."""
    if isinstance(node, ast.Import):
        return any(a.name == "mpi4py.MPI" or a.name.startswith("mpi4py.MPI.") for a in node.names)
    if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
        if node.module == "mpi4py":
            return any(a.name in ("MPI", "*") for a in node.names)
        return node.module == "mpi4py.MPI" or node.module.startswith("mpi4py.MPI.")
    return False


def check_module(
    module: Module, root: str, submodules: frozenset[str], graph: Graph
) -> list[Violation]:
    """All violations in one file; adds its imports to ``graph``."""
    source = module.path.read_text(encoding="utf-8")
    violations = []
    lines = len(source.splitlines())
    if lines > MAX_LINES:
        violations.append(
            Violation(module.path, MAX_LINES + 1, f"{lines} lines; modules stay <= {MAX_LINES}")
        )
    try:
        tree = ast.parse(source, filename=str(module.path))
    except SyntaxError as exc:
        return [*violations, Violation(module.path, exc.lineno or 1, f"syntax error: {exc.msg}")]
    graph.add_tree(module, tree)
    if layer_key(module) != TOP and layer_key(module) not in LAYERS:
        violations.append(
            Violation(
                module.path,
                1,
                f"{layer_key(module)!r} has no layer; add it to LAYERS in scripts/lint_layers.py "
                '(and to docs/architecture.md, "Layers")',
            )
        )
    for item in package_imports(module, tree, root, submodules):
        if isinstance(item, Violation):
            violations.append(item)
            continue
        reason = check_direction(module, item)
        if reason is not None:
            violations.append(Violation(module.path, item.line, reason))
    violations.extend(import_time_mpi(module, tree))
    return violations


def lint(package_dir: Path) -> list[Violation]:
    """All violations in the package at ``package_dir``, in file and line order."""
    submodules = top_level_names(package_dir)
    modules = discover(package_dir)
    graph = Graph(modules)
    violations = []
    for module in modules:
        violations.extend(check_module(module, package_dir.name, submodules, graph))
    violations.extend(check_ranks(graph))
    for loop in graph.cycles():
        violations.append(
            Violation(graph.modules[loop[0].source].path, loop[0].line, describe(loop))
        )
    return sorted(violations, key=lambda v: (str(v.path), v.line))


def _display(path: Path) -> Path:
    """``path`` relative to the working directory when it is below it, for short messages."""
    try:
        return path.resolve().relative_to(Path.cwd().resolve())
    except ValueError:
        return path


def main(argv: Sequence[str] | None = None) -> int:
    """Lints the package; prints violations; returns 1 if there are any, else 0."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("package_dir", nargs="?", type=Path, default=DEFAULT_PACKAGE)
    args = parser.parse_args(argv)
    package_dir: Path = args.package_dir
    if not (package_dir / "__init__.py").is_file():
        print(f"lint_layers: {package_dir} is not a package", file=sys.stderr)
        return 2
    violations = lint(package_dir)
    for violation in violations:
        print(Violation(_display(violation.path), violation.line, violation.message))
    count = len(discover(package_dir))
    if violations:
        print(f"lint_layers: {len(violations)} violation(s) in {count} modules", file=sys.stderr)
        return 1
    print(f"lint_layers: {count} modules OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
