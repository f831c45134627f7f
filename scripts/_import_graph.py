"""The module-level import graph of a package, and the import cycles in it (for lint_layers.py).

Stdlib only. Every ``import``/``from ... import`` anywhere in a module counts: at top level,
inside functions ("lazy") and under ``if TYPE_CHECKING:`` ("type-only"), since a lazy import
only moves a cycle to run time and a type-only one still ties the two modules together.

How an import becomes edges (``I`` the importing module):

* ``import a.b.c`` and ``from a.b.c import name`` import the module ``a.b.c``; ``from a.b import
  c`` where ``c`` is a submodule imports ``a.b.c``; importing a package imports its ``__init__``.
* Running any of these also runs the ``__init__`` of each package above the target (``a``,
  ``a.b``): these are edges too, except to the packages that contain ``I`` itself: those are
  being imported already when ``I`` runs, so a subpackage's ``__init__`` that re-exports its own
  submodules is no cycle with them. A submodule that names its own package explicitly (``from .
  import Name``, ``import mwms_mpi.distribute``) does get the edge: that is a real cycle.

A cycle is reported once per distinct loop, as the shortest loop through each edge of a strongly
connected component, so every edge that takes part in some cycle is named in some report.
"""

from __future__ import annotations

import ast
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

KINDS = ("import", "lazy", "type-only")


@dataclass(frozen=True)
class Module:
    """A source file of the package: its path, dotted name, and whether it is an ``__init__``."""

    path: Path
    name: str  # dotted, e.g. "mwms_mpi.cluster.spec"; a package's __init__ has the package's name
    is_package: bool  # an __init__.py: relative imports resolve from the package itself

    def containers(self) -> frozenset[str]:
        """The packages this module is inside of (itself too, for an ``__init__``)."""
        parts = self.name.split(".")
        stop = len(parts) if self.is_package else len(parts) - 1
        return frozenset(".".join(parts[:i]) for i in range(1, stop + 1))


def discover(package_dir: Path) -> list[Module]:
    """Every ``.py`` file under ``package_dir``, as modules of the package named like the dir."""
    root = package_dir.name
    modules = []
    for path in sorted(package_dir.rglob("*.py")):
        relative = path.relative_to(package_dir).with_suffix("").parts
        is_package = relative[-1] == "__init__"
        parts = (root, *relative[:-1]) if is_package else (root, *relative)
        modules.append(Module(path, ".".join(parts), is_package))
    return modules


def resolve_base(module: Module, node: ast.ImportFrom) -> str | None:
    """The absolute dotted module ``from X import ...`` names; None if it climbs above the root."""
    if node.level == 0:
        return node.module or ""
    parts = module.name.split(".")
    package = parts if module.is_package else parts[:-1]
    if node.level - 1 > len(package) - 1:
        return None
    base = package[: len(package) - (node.level - 1)]
    return ".".join([*base, *([node.module] if node.module else [])])


@dataclass(frozen=True)
class Edge:
    """``source`` imports ``target`` at ``line``; ``kind`` is one of :data:`KINDS`."""

    source: str
    target: str
    line: int
    kind: str


def is_type_checking(test: ast.expr) -> bool:
    """``TYPE_CHECKING`` or ``typing.TYPE_CHECKING``."""
    if isinstance(test, ast.Name):
        return test.id == "TYPE_CHECKING"
    return isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"


_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)


def import_nodes(tree: ast.AST) -> Iterator[tuple[ast.Import | ast.ImportFrom, str]]:
    """Every import statement in ``tree`` with its kind (type-only beats lazy beats import)."""
    stack: list[tuple[ast.AST, str]] = [(tree, "import")]
    while stack:
        node, kind = stack.pop()
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node, kind
        for child in ast.iter_child_nodes(node):
            child_kind = kind
            if isinstance(child, _FUNCTIONS) and kind == "import":
                child_kind = "lazy"
            if isinstance(node, ast.If) and is_type_checking(node.test) and child in node.body:
                child_kind = "type-only"
            stack.append((child, child_kind))


class Graph:
    """Edges between the modules of one package, built from their syntax trees."""

    def __init__(self, modules: Iterable[Module]) -> None:
        self.modules = {m.name: m for m in modules}
        self.edges: dict[str, dict[str, Edge]] = {name: {} for name in self.modules}

    def add_tree(self, module: Module, tree: ast.AST) -> None:
        """Adds the edges of every import in ``module``'s ``tree``."""
        own = module.containers()
        for node, kind in import_nodes(tree):
            for target, explicit in self._targets(module, node):
                if target == module.name or (not explicit and target in own):
                    continue
                edge = Edge(module.name, target, node.lineno, kind)
                known = self.edges[module.name].get(target)
                if known is None or (edge.line, edge.kind) < (known.line, known.kind):
                    self.edges[module.name][target] = edge

    def _targets(
        self, module: Module, node: ast.Import | ast.ImportFrom
    ) -> Iterator[tuple[str, bool]]:
        """(module, explicit) pairs an import runs: the named ones, then the packages above."""
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield from self._with_parents(alias.name)
            return
        base = resolve_base(module, node)
        if base is None:
            return
        for alias in node.names:
            if f"{base}.{alias.name}" in self.modules:
                yield from self._with_parents(f"{base}.{alias.name}")
            else:
                yield from self._with_parents(base)

    def _with_parents(self, dotted: str) -> Iterator[tuple[str, bool]]:
        """The module ``dotted`` (explicit) and the packages above it that it runs (not).

        A name that is no module of the tree (another distribution's, or one not written yet)
        still runs the packages of the tree above it."""
        parts = dotted.split(".")
        if dotted in self.modules:
            yield dotted, True
        for i in range(len(parts) - 1, 0, -1):
            if ".".join(parts[:i]) in self.modules:
                yield ".".join(parts[:i]), False

    def cycles(self) -> list[list[Edge]]:
        """Distinct import loops, each the shortest one through some edge, smallest name first."""
        found: dict[tuple[str, ...], list[Edge]] = {}
        for component in self._components():
            for source in sorted(component):
                for target, edge in sorted(self.edges[source].items()):
                    if target not in component:
                        continue
                    back = self._shortest_path(target, source, component)
                    loop = _rotate([edge, *back])
                    found.setdefault(tuple(e.source for e in loop), loop)
        return [found[key] for key in sorted(found, key=lambda k: (len(k), k))]

    def _shortest_path(self, start: str, goal: str, within: frozenset[str]) -> list[Edge]:
        """The edges of a shortest path ``start`` -> ``goal`` inside ``within`` (BFS)."""
        if start == goal:
            return []
        came: dict[str, Edge] = {}
        queue = deque([start])
        while queue:
            node = queue.popleft()
            for target, edge in sorted(self.edges[node].items()):
                if target in within and target not in came and target != start:
                    came[target] = edge
                    if target == goal:
                        path = [edge]
                        while path[0].source != start:
                            path.insert(0, came[path[0].source])
                        return path
                    queue.append(target)
        raise AssertionError(f"{goal} not reachable from {start} in its component")

    def _components(self) -> list[frozenset[str]]:
        """Strongly connected components with a cycle (Tarjan's algorithm, iterative)."""
        index: dict[str, int] = {}
        low: dict[str, int] = {}
        on_stack: set[str] = set()
        stack: list[str] = []
        components = []
        for root in sorted(self.edges):
            if root in index:
                continue
            work: list[tuple[str, Iterator[str]]] = [(root, iter(sorted(self.edges[root])))]
            index[root] = low[root] = len(index)
            stack.append(root)
            on_stack.add(root)
            while work:
                node, targets = work[-1]
                target = next(targets, None)
                if target is None:
                    work.pop()
                    if work:
                        low[work[-1][0]] = min(low[work[-1][0]], low[node])
                    if low[node] == index[node]:
                        members = set()
                        while True:
                            member = stack.pop()
                            on_stack.discard(member)
                            members.add(member)
                            if member == node:
                                break
                        if len(members) > 1 or node in self.edges[node]:
                            components.append(frozenset(members))
                elif target not in index:
                    index[target] = low[target] = len(index)
                    stack.append(target)
                    on_stack.add(target)
                    work.append((target, iter(sorted(self.edges[target]))))
                elif target in on_stack:
                    low[node] = min(low[node], index[target])
        return components


def _rotate(loop: list[Edge]) -> list[Edge]:
    """``loop`` starting at its smallest module name, so each loop has one spelling."""
    first = min(range(len(loop)), key=lambda i: loop[i].source)
    return loop[first:] + loop[:first]


def describe(loop: list[Edge]) -> str:
    """``import cycle: a -> b -> a (a:3, b:10 lazy)``: the loop and where each edge is."""
    chain = " -> ".join([*(e.source for e in loop), loop[0].source])
    places = ", ".join(
        f"{e.source}:{e.line}" + ("" if e.kind == "import" else f" {e.kind}") for e in loop
    )
    return f"import cycle: {chain} (imports at {places})"
