"""The layering the design names, checked on the code's own imports (module level and inside functions alike):
no import cycle between modules, imports only down the layers, fleet state owned by fleet/, small modules."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PRODUCT = ("common", "contract", "planner", "fleet", "executor", "clients", "dashboard", "launch")
MAX_MODULE_LINES = 450
# What each layer may not import (a prefix names a package and everything under it).
FORBIDDEN = {
    "contract": ("planner", "fleet", "executor", "clients", "devtools", "torch", "redis", "rq"),
    "planner": ("fleet", "executor", "clients", "devtools", "torch", "redis", "rq"),
    # The fleet is state: what a GPU class is and what a plan needs is the planner's, asked above it.
    "fleet": ("planner", "executor", "clients", "devtools", "torch"),
    "executor.service": ("executor.worker", "executor.training", "clients", "devtools", "torch"),
    # The worker starts training as a process; what both speak (the run's command line, rendezvous, exit statuses,
    # the holder and liveness files) is in contract/, so that the worker's process never imports the training stack.
    "executor.worker": ("executor.service", "executor.training", "clients", "devtools", "torch"),
    # A run follows its plan's recipe rules from contract/, never the planner's model of them.
    "executor.training": ("planner", "fleet", "executor.service", "executor.worker", "clients", "devtools", "redis",
                          "rq"),
    "clients": ("fleet", "executor", "dashboard", "devtools", "torch", "redis", "rq"),
    # The dashboard is an HTTP client of both services: it reaches them through clients/ only.
    "dashboard": ("planner", "fleet", "executor", "devtools", "torch", "redis", "rq"),
    "common": ("contract", "planner", "fleet", "executor", "clients", "dashboard", "devtools"),
}
# The process's entry point (`tunefleet`, launch/) is above every layer: no layer imports it.
FORBIDDEN = {layer: (*forbidden, "launch") for layer, forbidden in FORBIDDEN.items()}


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _sources() -> dict[str, Path]:
    return {_module_name(p): p for package in PRODUCT for p in sorted((ROOT / package).rglob("*.py"))}


def _imports(path: Path, module: str) -> Iterator[tuple[str, bool]]:
    """(imported name, whether at module level) for every import statement of the file."""
    tree = ast.parse(path.read_text(), str(path))
    top = {id(node) for node in tree.body}
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, id(node) in top
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parts + ([base] if base else []))
            for alias in node.names:
                yield f"{base}.{alias.name}", id(node) in top
                yield base, id(node) in top


def _graph() -> dict[str, set[str]]:
    sources = _sources()
    graph: dict[str, set[str]] = {m: set() for m in sources}
    for module, path in sources.items():
        for name, _ in _imports(path, module):
            if name in sources and name != module:
                graph[module].add(name)
    return graph


def _under(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def test_no_import_cycle_between_modules_even_through_function_level_imports() -> None:
    graph = _graph()
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    assert not cycles, f"import cycles: {cycles}"


@pytest.mark.parametrize("layer", sorted(FORBIDDEN))
def test_imports_only_go_down_the_layers(layer: str) -> None:
    wrong = []
    for module, path in _sources().items():
        if not _under(module, layer):
            continue
        for name, _ in _imports(path, module):
            for forbidden in FORBIDDEN[layer]:
                if _under(name, forbidden):
                    wrong.append(f"{module} imports {name}")
    assert not wrong, "\n".join(sorted(set(wrong)))


def test_only_the_fleet_package_names_a_redis_key_or_rq_internals() -> None:
    markers = ("tunefleet:v1" + ":", "rq" + ":")
    found = []
    scanned = (*PRODUCT, "devtools", "tests", "benchmarks")
    for path in sorted(p for folder in scanned for p in (ROOT / folder).rglob("*.py")):
        relative = path.relative_to(ROOT)
        if relative.parts[0] == "fleet":
            continue
        text = path.read_text(errors="replace")
        found += [f"{relative}: {m}" for m in markers if m in text]
    assert not found, "\n".join(found)


def test_outside_the_fleet_a_job_record_is_read_typed() -> None:
    """fleet.record.JobRecord is the only reading of a job's hash outside fleet/: no field by its bytes, no raw hash."""
    raw_read = re.compile(r"""\[b["'][a-z_]+["']\]|\.get\(b["'][a-z_]+["']|\bhgetall\(|\bhmget\(""")
    found = []
    for path in sorted(p for folder in PRODUCT if folder != "fleet" for p in (ROOT / folder).rglob("*.py")):
        found += [f"{path.relative_to(ROOT)}:{n}: {line.strip()}" for n, line in
                  enumerate(path.read_text().splitlines(), 1) if raw_read.search(line)]
    assert not found, "\n".join(found)


def test_modules_are_small() -> None:
    big = {m: n for m, p in _sources().items() if (n := len(p.read_text().splitlines())) > MAX_MODULE_LINES}
    assert not big, f"modules over {MAX_MODULE_LINES} lines: {big}; split them by what they do"
