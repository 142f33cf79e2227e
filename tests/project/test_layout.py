"""The package's three halves, read from the source: what each may import, no import cycles, what ships.

Every import counts, also those inside functions (a lazy import is still an edge a reader must follow).
The halves are folders, so a module added to one is checked with no list to update:

- ``runtime/``: the Spark side (driver, nodes, feed, report); imports itself and ``shared/`` only.
- ``shared/``: what both halves use (run directory, spec, registry, storage); imports only itself.
- the Airflow side (``hooks/``, ``operators/``, ``sensors/``, ``triggers/``, ``links/``, ``plugins/``):
  imports ``shared/`` and itself, never the runtime, never TensorFlow.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import airflow_tfos
from airflow_tfos.hooks.spark_conf import SHIPPED_PACKAGES, runtime_files

PACKAGE = Path(airflow_tfos.__file__).parent
AIRFLOW_SIDE = ("hooks", "operators", "sensors", "triggers", "links", "plugins")
ML = ("tensorflow", "keras", "tf_keras", "pyspark")


def _modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        if "__pycache__" in path.parts:
            continue
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


MODULES = _modules()


def _imports(name: str) -> set[str]:
    """Every module ``name`` imports anywhere in its source, as written (``from x import y``: ``x.y`` when
    that is a module of the package, else ``x``)."""
    path = MODULES[name]
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
            out.update(f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base for a in node.names)
    return out


def _ours(target: str) -> str | None:
    """The package module that ``target`` names (the nearest enclosing one), or None outside the package."""
    while target and target not in MODULES:
        target = target.rpartition(".")[0]
    return target or None


def _half(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "top"


def _offences(halves: tuple[str, ...], allowed: tuple[str, ...], banned_roots: tuple[str, ...]) -> list[str]:
    bad = []
    for name in sorted(MODULES):
        if _half(name) not in halves:
            continue
        for target in sorted(_imports(name)):
            root = target.split(".")[0]
            if root in banned_roots:
                bad.append(f"{name} imports {target}")
            ours = _ours(target) if root == "airflow_tfos" else None
            if ours and ours != "airflow_tfos" and _half(ours) not in allowed:
                bad.append(f"{name} imports {target}")
    return bad


def test_the_shared_package_imports_neither_half_nor_airflow_nor_ml_libraries():
    assert _offences(("shared",), ("shared",), ("airflow", *ML)) == []


def test_the_runtime_imports_itself_and_the_shared_package_and_never_airflow():
    assert _offences(("runtime",), ("runtime", "shared"), ("airflow",)) == []


def test_the_airflow_side_never_imports_the_runtime_or_tensorflow():
    assert _offences(AIRFLOW_SIDE, (*AIRFLOW_SIDE, "shared"), ML) == []


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in edges[v]:
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
                found.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def _edges() -> dict[str, set[str]]:
    edges = {}
    for name in MODULES:
        targets = {_ours(t) for t in _imports(name) if t.split(".")[0] == "airflow_tfos"}
        edges[name] = {t for t in targets if t and t != name}
    return edges


def test_the_package_has_no_import_cycles():
    assert _cycles(_edges()) == []


def test_the_cycle_check_finds_a_cycle():
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _cycles(edges) == [["a", "b", "c"]]


@pytest.mark.parametrize("half", ["runtime", "shared"])
def test_what_ships_to_spark_is_the_runtime_and_the_shared_package(half):
    shipped = set(runtime_files())
    assert half in SHIPPED_PACKAGES
    assert {p for p in (PACKAGE / half).rglob("*.py") if "__pycache__" not in p.parts} <= shipped
    assert {_half(n) for n, p in MODULES.items() if p in shipped} == {"top", *SHIPPED_PACKAGES}


def test_no_module_loose_at_the_package_top_but_the_provider_metadata():
    loose = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert loose == ["__init__.py", "get_provider_info.py"]


def test_the_barrier_task_and_the_tf_process_never_import_the_driver():
    # runtime/node/ runs in an executor's barrier task, runtime/program/ in a TF node's process: neither has the
    # driver's state, and what they import from the driver would be the driver's code run in the wrong process.
    bad = [
        f"{name} imports {target}"
        for name in sorted(MODULES)
        if name.startswith(("airflow_tfos.runtime.node", "airflow_tfos.runtime.program"))
        for target in sorted(_imports(name))
        if (_ours(target) or "").startswith("airflow_tfos.runtime.driver")
    ]
    assert bad == []


def _defined_exceptions() -> list[tuple[str, type]]:
    import importlib
    import inspect

    found = []
    for name in sorted(MODULES):
        if name.startswith("airflow_tfos.testing") or name.endswith("__main__"):
            continue
        module = importlib.import_module(name)
        for _, value in inspect.getmembers(module, inspect.isclass):
            if issubclass(value, BaseException) and value.__module__ == name:
                found.append((name, value))
    return found


def test_every_exception_the_package_defines_lives_in_an_errors_module_and_is_a_tfos_error():
    from airflow_tfos.shared.errors import TFoSError

    defined = _defined_exceptions()
    assert len(defined) > 30  # the walk found them (all runtime, shared and Airflow-side errors)
    assert [f"{m}.{c.__name__}" for m, c in defined if not m.endswith(".errors")] == []
    assert [f"{m}.{c.__name__}" for m, c in defined if not issubclass(c, TFoSError)] == []


def test_no_module_is_longer_than_500_lines():
    long = {name: n for name, path in MODULES.items() if (n := len(path.read_text().splitlines())) > 500}
    assert long == {}


def test_the_halves_show_their_parts_few_loose_modules():
    runtime = sorted(p.name for p in (PACKAGE / "runtime").glob("*.py"))
    assert len(runtime) <= 6, runtime
    assert {"driver", "node", "program"} <= {p.name for p in (PACKAGE / "runtime").iterdir() if p.is_dir()}
    hooks = sorted(p.name for p in (PACKAGE / "hooks").glob("*.py"))
    assert len(hooks) <= 12, hooks


def test_the_runtime_api_is_one_import_path_and_every_name_resolves():
    import airflow_tfos.runtime as runtime

    assert sorted(runtime.__all__) == sorted(runtime._API)
    for name in runtime.__all__:
        assert getattr(runtime, name).__module__.startswith(("airflow_tfos.runtime", "airflow_tfos.shared")), name
