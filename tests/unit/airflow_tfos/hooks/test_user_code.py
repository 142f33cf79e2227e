"""The user's own code: training functions named by import path, the package beside the DAG zipped by content
and shipped with --py-files, its hash in the spec, and the errors that say what to change.

The user's modules are written into a temporary folder outside the repository, put on ``sys.path`` as a
DAGs folder is, and nowhere else."""

from __future__ import annotations

import importlib
import sys
import zipfile

import pytest

from airflow_tfos.hooks.errors import RunConfigError, UserCodeError
from airflow_tfos.hooks.user_code import code_package, code_zip, import_path_of
from airflow_tfos.operators import TFoSTrainOperator
from airflow_tfos.shared.rundir import RunDir
from airflow_tfos.shared.spec import spec_hash
from tests.support.fakes import FakeBackend, make_context, use_backend
from tests.unit.airflow_tfos.hooks.test_tfos import read_records, yarn, yarn_hook  # noqa: F401 (the yarn fixture)

TRAINING = """
EPOCHS = {epochs}


def main_fun(args, ctx):
    return {{"epochs": EPOCHS}}
"""


@pytest.fixture
def dags(tmp_path, monkeypatch):
    """A DAGs folder outside the repository, on sys.path (as Airflow puts it), holding user modules."""
    folder = tmp_path / "dags"
    folder.mkdir()
    (folder / "user_training.py").write_text(TRAINING.format(epochs=3))
    package = folder / "user_models"
    (package / "nets").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "nets" / "__init__.py").write_text("")
    (package / "nets" / "linear.py").write_text(TRAINING.format(epochs=5))
    (package / "vocab.txt").write_text("a\nb\n")
    (package / "__pycache__").mkdir()
    (package / "__pycache__" / "junk.cpython-311.pyc").write_bytes(b"\0" * 10)
    monkeypatch.syspath_prepend(str(folder))
    yield folder
    for name in [n for n in sys.modules if n.split(".")[0] in ("user_training", "user_models")]:
        del sys.modules[name]


def train_op(tmp_path, **kwargs) -> TFoSTrainOperator:
    options = {
        "task_id": "train",
        "train_fn": "user_training:main_fun",
        "num_workers": 2,
        "input_mode": "TENSORFLOW",
        "run_dir": str(tmp_path / "run"),
        "poll_interval": 0.01,
        "deferrable": False,
        **kwargs,
    }
    return TFoSTrainOperator(**options)


class ShippingBackend(FakeBackend):
    """The fake backend, zipping the user's code as the real hook does."""

    def __init__(self, cache_dir) -> None:
        super().__init__()
        self.cache_dir = cache_dir
        self.shipped = []

    def ship_user_code(self, packages):
        shipped = code_zip(packages, self.cache_dir)
        self.shipped.append(shipped)
        return shipped


# --- naming the function ---------------------------------------------------------------------------------


def test_a_function_is_named_by_its_module_and_name(dags):
    module = importlib.import_module("user_models.nets.linear")
    assert import_path_of(module.main_fun) == "user_models.nets.linear:main_fun"
    assert import_path_of("pkg.mod:fn") == "pkg.mod:fn"


def test_functions_the_cluster_cannot_import_by_name_are_refused_at_parse_time(tmp_path):
    def nested(args, ctx):
        return None

    with pytest.raises(RunConfigError, match=r"'train'.*lambda.*define it with def at the top level"):
        train_op(tmp_path, train_fn=lambda args, ctx: None)
    with pytest.raises(RunConfigError, match=r"defined inside a function.*move it to the top level of module"):
        train_op(tmp_path, train_fn=nested)
    in_main = type(nested)(nested.__code__, {}, "main_fun")
    in_main.__module__, in_main.__qualname__ = "__main__", "main_fun"
    with pytest.raises(UserCodeError, match=r"defined in __main__.*move it into a module of its own"):
        import_path_of(in_main)
    with pytest.raises(UserCodeError, match="must be 'package.module:function' or a function"):
        import_path_of(42)


def test_an_operator_given_a_function_asks_for_its_import_path(dags, tmp_path):
    module = importlib.import_module("user_training")
    op = train_op(tmp_path, train_fn=module.main_fun)
    assert op.train_fn == "user_training:main_fun"


# --- what is shipped ------------------------------------------------------------------------------------


def test_the_module_or_package_beside_the_dag_is_what_is_shipped(dags, tmp_path):
    module = code_package("user_training:main_fun")
    assert (module.name, module.root) == ("user_training", dags / "user_training.py")
    package = code_package("user_models.nets.linear:main_fun")
    assert (package.name, package.root) == ("user_models", dags / "user_models")
    shipped = code_zip([module, package], tmp_path / "cache")
    with zipfile.ZipFile(shipped.path) as archive:
        names = sorted(archive.namelist())
    assert names == [
        "user_models/__init__.py", "user_models/nets/__init__.py", "user_models/nets/linear.py",
        "user_models/vocab.txt", "user_training.py",
    ]  # fmt: skip
    assert shipped.packages == ("user_models", "user_training") and shipped.size == shipped.path.stat().st_size


def test_installed_code_and_airflow_tfos_are_not_shipped():
    assert code_package("json:dumps") is None  # the standard library
    assert code_package("numpy:array") is None  # site-packages: the cluster's environment has it
    assert code_package("airflow_tfos.runtime.examples.digits:train_fed") is None  # in the runtime zip


def test_the_zip_is_named_by_content_and_a_changed_file_makes_a_new_one(dags, tmp_path):
    package = code_package("user_models.nets.linear:main_fun")
    first = code_zip([package], tmp_path / "cache")
    again = code_zip([package], tmp_path / "cache")
    assert (again.path, again.digest) == (first.path, first.digest)
    (dags / "user_models" / "nets" / "linear.py").write_text(TRAINING.format(epochs=6))
    changed = code_zip([package], tmp_path / "cache")
    assert changed.digest != first.digest and changed.path != first.path


def test_a_cached_zip_whose_content_was_changed_is_built_again(dags, tmp_path):
    package = code_package("user_training:main_fun")
    first = code_zip([package], tmp_path / "cache")
    with zipfile.ZipFile(first.path, "w") as archive:  # someone replaced the cached file
        archive.writestr("user_training.py", "import os; os.system('true')\n")
    again = code_zip([package], tmp_path / "cache")
    assert again.path == first.path
    with zipfile.ZipFile(again.path) as archive:
        assert archive.read("user_training.py").decode() == (dags / "user_training.py").read_text()


def test_code_too_large_to_ship_names_packed_env(dags, tmp_path):
    (dags / "user_models" / "weights.bin").write_bytes(b"\0" * 200_000)
    with pytest.raises(UserCodeError, match=r"user_models.*larger than 0.1 MB.*packed_env="):
        code_zip([code_package("user_models.nets.linear:main_fun")], tmp_path / "cache", max_mb=0.1)


# --- the operator ---------------------------------------------------------------------------------------


def test_the_spec_names_the_code_and_its_hash_changes_with_the_code_only(dags, tmp_path):
    def digest() -> str:
        op = train_op(tmp_path)
        use_backend(op, ShippingBackend(tmp_path / "cache"))
        spec = op.build_spec().to_json()
        assert spec["code"]["packages"] == ["user_training"]
        return spec_hash(spec)

    first = digest()
    assert digest() == first  # nothing changed: the same request (a rerun is a no-op)
    (dags / "user_training.py").write_text(TRAINING.format(epochs=4))
    assert digest() != first  # a fix of the code is a new request, which trains again


def test_the_operator_ships_the_code_and_a_rerun_ships_nothing_new(dags, tmp_path):
    op = train_op(tmp_path)
    backend = ShippingBackend(tmp_path / "cache")
    use_backend(op, backend)
    backend.on_submit = lambda app_id: _export(op)
    op.execute(make_context())
    assert len(backend.submitted) == 1 and backend.shipped[0].packages == ("user_training",)
    rerun = train_op(tmp_path)
    use_backend(rerun, backend)
    rerun.execute(make_context())
    assert len(backend.submitted) == 1  # the export of this spec (and code) is there: nothing to do


def _export(op: TFoSTrainOperator) -> None:
    rundir = RunDir(op.run_dir)
    rundir.publish_export(rundir.export_staging(), spec_hash=op.request_hash(), step=1, metrics={})


def test_a_module_not_importable_here_is_refused_before_submitting(tmp_path):
    op = train_op(tmp_path, train_fn="not_beside_the_dag:main_fun")
    backend = ShippingBackend(tmp_path / "cache")
    use_backend(op, backend)
    with pytest.raises(UserCodeError, match=r"module 'not_beside_the_dag' is not importable.*py_files= or packed_env="):
        op.execute(make_context())
    assert backend.submitted == []
    # the cluster has it (a packed environment): nothing to ship, nothing refused
    op = train_op(tmp_path, train_fn="not_beside_the_dag:main_fun", packed_env="hdfs:///envs/env.tar.gz")
    use_backend(op, backend)
    backend.on_submit = lambda app_id: _export(op)
    op.execute(make_context())
    assert len(backend.submitted) == 1 and backend.shipped == []


def test_the_code_goes_with_py_files_to_yarn(dags, yarn, tmp_path):  # noqa: F811
    hook = yarn_hook(yarn, tmp_path, py_files="/jobs/extra.py")
    shipped = hook.ship_user_code([code_package("user_models.nets.linear:main_fun")])
    hook.submit("hdfs:///runs/u1", tag="tfos-u1", name="user code", num_nodes=2)
    (record,) = read_records(yarn.records)
    py_files = record["options"]["--py-files"].split(",")
    assert str(shipped.path) in py_files and "/jobs/extra.py" in py_files
    assert any(p.rsplit("/", 1)[-1].startswith("airflow_tfos-runtime-") for p in py_files)
