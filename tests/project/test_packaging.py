"""The provider as users install it: a wheel built from this tree, installed into a fresh virtual
environment beside another supported Airflow release than the one pinned for development (3.3.0,
the lowest this package declares). There, every operator, hook, sensor and trigger imports,
``airflow providers list`` lists the provider, and the example DAGs parse."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import venv

import pytest

from tests.conftest import REPO

pytestmark = pytest.mark.integration

#: Another supported release than requirements/constraints.txt pins (3.3.2); override to try others.
OTHER_AIRFLOW = os.environ.get("AIRFLOW_TFOS_OTHER_AIRFLOW", "3.3.0")

CHECK = """
import importlib, sys
from airflow.dag_processing.dagbag import DagBag
from airflow_tfos.get_provider_info import get_provider_info

info = get_provider_info()
for kind in ("operators", "sensors", "hooks", "triggers"):
    for entry in info[kind]:
        for module in entry["python-modules"]:
            importlib.import_module(module)
for path in [c["hook-class-name"] for c in info["connection-types"]] + info["extra-links"]:
    module, name = path.rsplit(".", 1)
    getattr(importlib.import_module(module), name)
from airflow_tfos.operators import *
from airflow_tfos.sensors import *
from airflow_tfos.triggers import *
from airflow_tfos.hooks import TFoSHook, YarnHook, RunDirHook, ModelRegistryHook

bag = DagBag(dag_folder=sys.argv[1])
assert not bag.import_errors, bag.import_errors
print("dags:", ",".join(sorted(bag.dag_ids)))
import airflow
print("airflow:", airflow.__version__)
print("tensorflow loaded:", any(m.split(".")[0] == "tensorflow" for m in sys.modules))
"""


def run(argv, **kwargs) -> subprocess.CompletedProcess:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=900, **kwargs)
    assert done.returncode == 0, f"{argv}: {done.stdout[-3000:]}{done.stderr[-3000:]}"
    return done


def test_the_wheel_installs_beside_another_airflow_lists_its_provider_and_parses_the_examples(tmp_path):
    dist, env_dir, home = tmp_path / "dist", tmp_path / "venv", tmp_path / "airflow-home"
    try:
        run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(dist), str(REPO)])
        (wheel,) = dist.glob("airflow_tfos-*.whl")
        venv.create(env_dir, with_pip=True)
        python = env_dir / "bin" / "python"
        run([str(python), "-m", "pip", "install", "-q", str(wheel), f"apache-airflow=={OTHER_AIRFLOW}"])
        env = {
            **{k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")},
            "AIRFLOW_HOME": str(home),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        }
        cwd = tmp_path  # not the repository: only the installed wheel is importable
        checked = run([str(python), "-c", CHECK, str(REPO / "example_dags")], env=env, cwd=cwd).stdout
        assert f"airflow: {OTHER_AIRFLOW}" in checked
        assert "tfos_nightly_digits" in checked and "tfos_lifecycle_digits" in checked
        assert "tensorflow loaded: False" in checked  # the Airflow side never imports TensorFlow
        origin = run([str(python), "-c", "import airflow_tfos; print(airflow_tfos.__file__)"], env=env, cwd=cwd)
        assert str(env_dir) in origin.stdout  # the wheel's copy, not this tree
        listed = run([str(env_dir / "bin" / "airflow"), "providers", "list"], env=env, cwd=cwd).stdout
        assert "airflow-tfos" in listed
    finally:
        shutil.rmtree(env_dir, ignore_errors=True)


def test_the_metadata_declares_ranges_and_the_constraints_pin_them():
    import tomllib

    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    pinned = dict(
        line.lower().replace("_", "-").split("==", 1)
        for line in (REPO / "requirements" / "constraints.txt").read_text().splitlines()
        if "==" in line
    )
    declared = project["dependencies"] + project["optional-dependencies"]["runtime"]
    for requirement in declared:
        name = requirement.split(">")[0].split("<")[0].split("=")[0].split("[")[0].strip().lower()
        assert "==" not in requirement, f"{requirement}: the package declares ranges; pin in constraints.txt"
        assert name in pinned, f"{name} is not pinned in requirements/constraints.txt"
    airflow = next(r for r in project["dependencies"] if r.startswith("apache-airflow>"))
    assert ">=3.3.0" in airflow and "<4" in airflow
    assert pinned["pyspark"] == pinned["pyspark-client"]  # they install into the same folder
    assert pinned["apache-airflow"] != OTHER_AIRFLOW  # the wheel test tries another release


def test_the_sdist_and_the_wheel_carry_the_license_the_types_marker_and_the_provider_entry_point(tmp_path):
    """Built with the build backend itself (what ``pip wheel`` and ``python -m build`` call), offline."""
    import email
    import tarfile
    import tomllib
    import zipfile

    from packaging.requirements import Requirement
    from packaging.specifiers import SpecifierSet

    import airflow_tfos

    run([sys.executable, "-m", "hatchling", "build", "-d", str(tmp_path)], cwd=REPO)
    version = airflow_tfos.__version__
    (wheel,) = tmp_path.glob(f"airflow_tfos-{version}-py3-none-any.whl")
    (sdist,) = tmp_path.glob(f"airflow_tfos-{version}.tar.gz")
    license_text = (REPO / "LICENSE").read_text()
    assert license_text.lstrip().startswith("Apache License") and "Version 2.0" in license_text

    with zipfile.ZipFile(wheel) as zipped:
        names = set(zipped.namelist())
        info = f"airflow_tfos-{version}.dist-info"
        metadata = email.message_from_bytes(zipped.read(f"{info}/METADATA"))
        entry_points = zipped.read(f"{info}/entry_points.txt").decode()
        assert zipped.read(f"{info}/licenses/LICENSE").decode() == license_text
    assert "airflow_tfos/py.typed" in names
    assert not [n for n in names if n.startswith(("tests/", "example_dags/", "bench/"))]  # the package only
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert metadata["Name"] == "airflow-tfos" and metadata["Version"] == version
    assert metadata["License-Expression"] == project["license"] == "Apache-2.0"
    assert SpecifierSet(metadata["Requires-Python"]) == SpecifierSet(project["requires-python"])
    declared = [*project["dependencies"]] + [
        f"{req}; extra == '{extra}'" for extra, reqs in project["optional-dependencies"].items() for req in reqs
    ]
    assert {str(Requirement(r)) for r in metadata.get_all("Requires-Dist")} == {str(Requirement(r)) for r in declared}
    assert "[apache_airflow_provider]\nprovider_info = airflow_tfos.get_provider_info:get_provider_info" in entry_points
    # Project URLs: the documentation, the source and the changelog, each where the repository keeps it; the
    # provider info's documentation link is the same page (the project's docs, not a package index).
    urls = dict(url.split(", ", 1) for url in metadata.get_all("Project-URL"))
    assert urls == project["urls"], urls
    source = urls["Source"]
    assert source.startswith("https://github.com/") and source.count("/") == 4, source
    assert urls["Documentation"] == f"{source}/tree/main/docs"
    assert urls["Changelog"] == f"{source}/blob/main/CHANGELOG.md"
    from airflow_tfos.get_provider_info import get_provider_info

    (integration,) = get_provider_info()["integrations"]
    assert integration["external-doc-url"] == urls["Documentation"]

    with tarfile.open(sdist) as tar:
        files = {name.split("/", 1)[1] for name in tar.getnames() if "/" in name}
    for needed in ("LICENSE", "CHANGELOG.md", "README.md", "pyproject.toml", "airflow_tfos/py.typed",
                   "requirements/constraints.txt", "docs/architecture.md", "docs/installation.md",
                   "docs/troubleshooting.md", "docs/operators/train.md", "scripts/bootstrap.sh"):  # fmt: skip
        assert needed in files, f"{needed} is not in the sdist"
