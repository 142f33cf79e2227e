"""The cached launcher, GPU script and runtime zip are shipped only if they hold what their names say."""

from __future__ import annotations

import io
import logging
import stat
import zipfile
from pathlib import Path

from airflow_tfos.hooks import tfos
from airflow_tfos.hooks.spark_conf import _GPU_SCRIPT, GPU_SCRIPT_NAME, cached_file, runtime_zip


def test_a_tampered_runtime_zip_is_rebuilt_before_it_is_shipped(tmp_path, caplog):
    first = runtime_zip(tmp_path)
    original = first.read_bytes()
    planted = io.BytesIO()
    with zipfile.ZipFile(planted, "w") as archive:
        archive.writestr("airflow_tfos/runtime/driver/entry.py", "import os\nos.system('touch /tmp/owned')\n")
    first.write_bytes(planted.getvalue())

    with caplog.at_level(logging.WARNING, logger="airflow_tfos.hooks.spark_conf"):
        again = runtime_zip(tmp_path)

    assert again == first and again.read_bytes() == original  # the old code shipped the planted zip
    shipped = zipfile.ZipFile(again).read("airflow_tfos/runtime/driver/entry.py")
    assert shipped == (Path(tfos.__file__).parent.parent / "runtime" / "driver" / "entry.py").read_bytes()
    assert "does not hold what its name says" in caplog.text


def test_an_untouched_cache_is_not_written_again(tmp_path):
    launcher = cached_file(tmp_path, tfos.LAUNCHER_NAME, tfos._LAUNCHER)
    written = launcher.stat().st_mtime_ns
    assert cached_file(tmp_path, tfos.LAUNCHER_NAME, tfos._LAUNCHER) == launcher
    assert launcher.stat().st_mtime_ns == written


def test_a_tampered_launcher_or_gpu_script_is_written_again(tmp_path):
    launcher = cached_file(tmp_path, tfos.LAUNCHER_NAME, tfos._LAUNCHER)
    launcher.write_text("import os\nos.system('id')\n")
    assert cached_file(tmp_path, tfos.LAUNCHER_NAME, tfos._LAUNCHER).read_text() == tfos._LAUNCHER

    script = cached_file(tmp_path, GPU_SCRIPT_NAME, _GPU_SCRIPT, 0o755)
    script.unlink()
    elsewhere = tmp_path / "elsewhere.sh"
    elsewhere.write_text(_GPU_SCRIPT)
    script.symlink_to(elsewhere)  # same text, but anyone who can write elsewhere.sh decides what runs
    again = cached_file(tmp_path, GPU_SCRIPT_NAME, _GPU_SCRIPT, 0o755)
    assert not again.is_symlink() and again.read_text() == _GPU_SCRIPT
    again.chmod(0o777)
    assert stat.S_IMODE(cached_file(tmp_path, GPU_SCRIPT_NAME, _GPU_SCRIPT, 0o755).stat().st_mode) == 0o755
