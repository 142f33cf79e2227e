"""The code passes the project's ruff rules (pyproject.toml)."""

from __future__ import annotations

import subprocess
import sys

from tests.conftest import REPO


def test_ruff_check_passes():
    done = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "airflow_tfos", "tests", "bench", "scripts", "example_dags"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
