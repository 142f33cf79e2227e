"""The package's three halves, read from the source: what each may import, no import cycles, what ships.

Every import counts, also those inside functions (a lazy import is still an edge a reader must follow).
The halves are folders, so a module added to one is checked with no list to update:

- ``runtime/``: the Spark side (driver, nodes, feed, report); imports itself and ``shared/`` only.
- ``shared/``: what both halves use (run directory, spec, registry, storage); imports only itself.
- the Airflow side (``hooks/``, ``operators/``, ``sensors/``, ``triggers/``, ``links/``, ``plugins/``):
  imports ``shared/`` and itself, never the runtime, never TensorFlow.

The test tree, read from its files: every test file sits in a tier folder (docs/testing.md), and a unit test
file names the module or subpackage it tests by its path.
"""

from __future__ import annotations

import ast
import importlib
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


# --- the test tree ------------------------------------------------------------------------------------------

TESTS = Path(__file__).resolve().parent.parent
#: The folders test files may sit in: ``unit/`` mirrors the package, an integration folder is named for what
#: its tests start, then the drills, the multi-host cluster and the checks of the whole project.
TIERS = (
    "unit",
    "integration/spark",
    "integration/airflow",
    "integration/kerberos",
    "integration/hadoop",
    "drills",
    "multihost",
    "project",
)
#: Folders of DAG files, which Airflow reads by path: no package.
DAG_FOLDERS = ("dags",)


def _test_files(root: Path) -> list[Path]:
    return sorted(
        p
        for p in root.rglob("*.py")
        if "__pycache__" not in p.parts and (p.name.startswith("test_") or p.name.endswith("_test.py"))
    )


def _modules_of(package: Path) -> set[str]:
    """The modules and subpackages of the package folder ``package`` (none when it is no package)."""
    if not (package / "__init__.py").is_file():
        return set()
    modules = {p.stem for p in package.glob("*.py") if p.stem != "__init__"}
    return modules | {p.name for p in package.iterdir() if (p / "__init__.py").is_file()}


def _misplaced(root: Path, package: Path) -> list[str]:
    """The test files under ``root`` (a tests folder) outside the tiers, and the unit test files that name no
    module or subpackage of ``package`` at the path they mirror: ``unit/<package>/<path>/test_<module>.py``,
    or ``test_<module>_<aspect>.py`` for another file of the same module."""
    bad = []
    for path in _test_files(root):
        relative = path.relative_to(root)
        folder = relative.parent.as_posix()
        tier = next((t for t in TIERS if folder == t or folder.startswith(f"{t}/")), None)
        if tier is None:
            bad.append(f"{relative}: not in a tier folder")
        elif tier == "unit":
            mirrored = relative.parent.relative_to("unit")
            modules = _modules_of(package.parent / mirrored) if mirrored.parts[:1] == (package.name,) else set()
            name = path.stem.removeprefix("test_")
            if not any(name == module or name.startswith(f"{module}_") for module in modules):
                bad.append(f"{relative}: names no module or subpackage of {mirrored.as_posix()}")
    return bad


def _folders_without_init(root: Path) -> list[str]:
    """Folders under ``root`` that are not packages (tests are imported as ``tests.<path>``), DAG folders aside."""
    return sorted(
        str(folder.relative_to(root))
        for folder in [root, *root.rglob("*")]
        if folder.is_dir()
        and not {"__pycache__", *DAG_FOLDERS} & set(folder.relative_to(root).parts)
        and not (folder / "__init__.py").is_file()
    )


def test_every_test_file_sits_in_its_tier_and_a_unit_test_file_names_its_module():
    assert len(_test_files(TESTS / "unit")) > 50  # the walk found them
    assert _misplaced(TESTS, PACKAGE) == []


def test_every_folder_of_tests_is_a_package_and_none_shadows_the_package():
    assert _folders_without_init(TESTS) == []
    # tests/unit/airflow_tfos is the package tests.unit.airflow_tfos: the package imported is the project's
    assert PACKAGE.parent == TESTS.parent and PACKAGE.name == "airflow_tfos"
    assert importlib.import_module("tests.unit.airflow_tfos").__name__ == "tests.unit.airflow_tfos"


def test_the_tree_check_finds_misplaced_files(tmp_path):
    package = tmp_path / "pkg"
    for name in ("__init__.py", "mod.py", "sub/__init__.py", "sub/inner.py", "plain/other.py"):
        (package / name).parent.mkdir(parents=True, exist_ok=True)
        (package / name).touch()
    tests = tmp_path / "tests"
    for name in (
        "unit/pkg/test_mod.py",
        "unit/pkg/test_mod_aspect.py",
        "unit/pkg/test_sub.py",
        "unit/pkg/sub/test_inner.py",
        "unit/pkg/test_module.py",
        "unit/pkg/plain/test_other.py",
        "unit/test_pkg.py",
        "integration/spark/test_cluster.py",
        "integration/anything/test_else.py",
        "test_loose.py",
        "drills/helpers.py",
    ):
        (tests / name).parent.mkdir(parents=True, exist_ok=True)
        (tests / name).touch()
    assert _misplaced(tests, package) == [
        "integration/anything/test_else.py: not in a tier folder",
        "test_loose.py: not in a tier folder",
        "unit/pkg/plain/test_other.py: names no module or subpackage of pkg/plain",
        "unit/pkg/test_module.py: names no module or subpackage of pkg",
        "unit/test_pkg.py: names no module or subpackage of .",
    ]
    (tests / "unit" / "pkg" / "__init__.py").touch()
    assert _folders_without_init(tests) == [
        ".",
        "drills",
        "integration",
        "integration/anything",
        "integration/spark",
        "unit",
        "unit/pkg/plain",
        "unit/pkg/sub",
    ]
