"""The provider is visible to Airflow and the runtime stays free of Airflow."""

from __future__ import annotations

import subprocess
import sys
from importlib.metadata import entry_points


def test_provider_entry_point_returns_provider_info():
    (entry,) = [e for e in entry_points(group="apache_airflow_provider") if e.value.startswith("airflow_tfos")]
    info = entry.load()()
    assert info["package-name"] == "airflow-tfos"
    assert info["versions"] == ["0.1.0"]


def test_airflow_lists_the_provider():
    out = subprocess.run(
        [sys.executable, "-m", "airflow", "providers", "get", "airflow-tfos", "-o", "json"],
        capture_output=True,
        text=True,
        timeout=180,
        env={**__import__("os").environ, "AIRFLOW__CORE__LOAD_EXAMPLES": "False"},
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert "airflow-tfos" in out.stdout


def test_runtime_never_imports_airflow():
    code = (
        "import sys, airflow_tfos.runtime, airflow_tfos.runtime.compat, airflow_tfos.runtime.node.task, "
        "airflow_tfos.runtime.program.child, airflow_tfos.runtime.examples.digits; "
        "bad = [m for m in sys.modules if m == 'airflow' or m.startswith('airflow.')]; "
        "print(bad); sys.exit(1 if bad else 0)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_shared_modules_import_neither_tensorflow_nor_pyspark():
    code = (
        "import sys, airflow_tfos.get_provider_info, airflow_tfos.shared.rundir, airflow_tfos.shared.storage, "
        "airflow_tfos.shared.spec, "
        "airflow_tfos.hooks.run_dir, airflow_tfos.hooks.backends.state; "
        "bad = [m for m in sys.modules if m.split('.')[0] in ('tensorflow', 'pyspark', 'keras')]; "
        "print(bad); sys.exit(1 if bad else 0)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr


def test_every_listed_class_and_module_imports_without_tensorflow():
    from airflow_tfos.get_provider_info import get_provider_info

    info = get_provider_info()
    modules = [
        m for kind in ("operators", "sensors", "hooks", "triggers") for e in info[kind] for m in e["python-modules"]
    ]
    classes = [c["hook-class-name"] for c in info["connection-types"]] + info["extra-links"]
    assert any(m.endswith("operators.train") for m in modules) and "airflow_tfos.hooks.yarn.YarnHook" in classes
    code = (
        "import importlib, sys\n"
        f"for m in {modules!r}: importlib.import_module(m)\n"
        f"for c in {classes!r}:\n"
        "    mod, name = c.rsplit('.', 1); getattr(importlib.import_module(mod), name)\n"
        "from airflow_tfos.operators import *\nfrom airflow_tfos.sensors import *\nfrom airflow_tfos.hooks import *\n"
        "from airflow_tfos.hooks import TFoSHook, YarnHook, RunDirHook, ModelRegistryHook\n"
        "bad = [m for m in sys.modules if m.split('.')[0] in ('tensorflow', 'keras')]\n"
        "print(bad); sys.exit(1 if bad else 0)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
