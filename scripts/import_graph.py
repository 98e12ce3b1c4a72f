"""The project's import graph, from the source alone (an AST walk, nothing imported).

`python scripts/import_graph.py` prints every import circle, every function-level import of a project
module, and every arrow that runs against the declared order of rooms (`ROOMS`); it exits 1 if it finds any.
tests/test_layering.py runs the same checks.

Example:
    >>> graph = imports_of(ROOT)
    >>> "proxy.pipeline" in graph and "mechanisms.sampling" in graph
    True
"""

from __future__ import annotations

import ast
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("proxy", "accountant", "mechanisms")

# The rooms from the top (entry points) to the bottom (pure math). A module may import its own room and any
# room below it, never one above. A room is a module or package prefix, and the longest matching prefix wins:
# `proxy.http.errors` is a room below `proxy.http`'s routes. Rooms on one line share a floor.
ROOMS: tuple[tuple[str, ...], ...] = (
    ("proxy.__main__",),
    ("proxy.cli",),
    ("proxy.app",),
    ("proxy.wire",),  # the PostgreSQL protocol: a front-end beside HTTP, running the query route's work
    ("proxy.http",),  # routes, operator routes, dashboard, answer formats, the HTTP protocol
    ("proxy.http.middleware",),
    ("proxy.http.errors", "proxy.http.metrics", "proxy.http.decimal_json"),
    ("proxy.http.views",),
    ("proxy.pipeline",),  # the request path: plan -> admit -> run -> release
    ("proxy.run",),
    ("proxy.store",),
    ("proxy.policy",),
    ("proxy.engines",),
    ("proxy.schemas", "proxy.settings", "proxy.logs"),
    ("proxy.query", "proxy.query.planner"),  # plan(sql) = parse -> analyse -> price -> rewrite
    ("proxy.query.auto",),
    ("proxy.query.rewrite",),
    ("proxy.query.release",),
    ("proxy.query.price",),
    ("proxy.query.analyse", "proxy.query.computed"),  # one grammar: computed values appear in every clause
    ("proxy.query.joins",),  # a join chain's virtual table and the SQL computing it
    ("proxy.query.parse",),
    ("proxy.query.catalog", "proxy.query.types", "proxy.query.errors", "proxy.query.expr"),
    ("accountant.audit.log",),  # the audit log, stored beside the ledger
    ("accountant.ledger",),
    ("accountant.audit",),  # the hash chain and its tables, shared by the log and the ledger's admit
    ("accountant.report", "accountant.pld_cells", "accountant.tradeoff"),
    ("accountant.cells",),
    ("accountant.filter",),
    ("accountant.loss",),
    ("accountant", "accountant.events", "accountant.errors", "accountant.cell_scope", "accountant.file_lock"),
    ("mechanisms.joint_quantiles",),
    ("mechanisms.dp_quantile", "mechanisms.threshold"),
    ("mechanisms.gdp",),
    ("mechanisms.gaussian", "mechanisms.laplace"),
    ("mechanisms", "mechanisms.rounding", "mechanisms.sampling"),
)


@dataclass(frozen=True)
class Import:
    source: str  # the importing module
    target: str  # the imported project module
    line: int
    nested: bool  # inside a function or class body, not at module level


def module_name(path: Path, root: Path = ROOT) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _resolve(name: str, modules: set[str]) -> str | None:
    """The project module an imported dotted name lands in (`a.b.name` -> `a.b`)."""
    while name:
        if name in modules:
            return name
        name = name.rpartition(".")[0]
    return None


def _walk(tree: ast.Module) -> list[tuple[ast.AST, bool]]:
    found: list[tuple[ast.AST, bool]] = []

    def visit(node: ast.AST, nested: bool) -> None:
        for child in ast.iter_child_nodes(node):
            inner = nested or isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef | ast.Lambda)
            if isinstance(child, ast.Import | ast.ImportFrom):
                found.append((child, nested))
            visit(child, inner)

    visit(tree, False)
    return found


def edges(root: Path = ROOT) -> list[Import]:
    """Every import of one project module by another (`if TYPE_CHECKING:` blocks included: a circle of types
    is a circle of design)."""
    paths = sorted(p for package in PACKAGES for p in (root / package).rglob("*.py"))
    modules = {module_name(p, root) for p in paths}
    found: list[Import] = []
    for path in paths:
        source = module_name(path, root)
        package = source if path.name == "__init__.py" else source.rpartition(".")[0]
        for node, nested in _walk(ast.parse(path.read_text())):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*anchor, base] if base else anchor)
                names = [f"{base}.{alias.name}" for alias in node.names] or [base]
            for name in names:
                target = _resolve(name, modules)
                if target is not None and target != source:
                    found.append(Import(source, target, node.lineno, nested))
    return found


def imports_of(root: Path = ROOT) -> dict[str, set[str]]:
    """Module -> the project modules it imports."""
    paths = sorted(p for package in PACKAGES for p in (root / package).rglob("*.py"))
    graph: dict[str, set[str]] = {module_name(p, root): set() for p in paths}
    for edge in edges(root):
        graph[edge.source].add(edge.target)
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = [0]

    def connect(node: str) -> None:
        index[node] = low[node] = counter[0]
        counter[0] += 1
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph.get(node, ())):
            if target not in index:
                connect(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    sys.setrecursionlimit(10_000)
    for node in sorted(graph):
        if node not in index:
            connect(node)
    return found


def room(module: str) -> int | None:
    """The position of a module's room in ROOMS (0 = top), by the longest matching prefix."""
    best: tuple[int, int] | None = None
    for position, prefixes in enumerate(ROOMS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and (best is None or len(prefix) > best[1]):
                best = (position, len(prefix))
    return None if best is None else best[0]


def upward(found: list[Import]) -> list[Import]:
    """Imports of a room above the importer's own."""
    wrong = []
    for edge in found:
        source, target = room(edge.source), room(edge.target)
        if source is not None and target is not None and target < source:
            wrong.append(edge)
    return wrong


def main() -> int:
    found = edges()
    problems = 0
    for component in circles(imports_of()):
        problems += 1
        print("circle:", " -> ".join(component))
    graph = imports_of()
    for module in sorted(graph):
        if room(module) is None and graph[module]:  # a package's docstring-only __init__ needs no room
            problems += 1
            print("in no room:", module)
    for edge in upward(found):
        problems += 1
        print(f"upward: {edge.source}:{edge.line} -> {edge.target}")
    print(f"{len(imports_of())} modules, {len(found)} imports, {problems} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
