"""``requirements/runtime.txt``, the packed environment's recipe, is what the suite's packed environments hold."""

from __future__ import annotations

import re

from airflow_tfos.testing.packed_env import requirements
from tests.conftest import REPO


def test_the_runtime_requirements_are_what_the_packed_environments_hold_and_neither_airflow_nor_pyspark():
    written = (REPO / "requirements" / "runtime.txt").read_text()
    assert written == requirements(), (
        "requirements/runtime.txt differs from the installed runtime packages: write it again with "
        "python -m airflow_tfos.testing.packed_env --requirements > requirements/runtime.txt"
    )
    lines = [line for line in written.splitlines() if line and not line.startswith("#")]
    pinned = {re.sub(r"[-_.]+", "-", line.split("==")[0]).lower() for line in lines}
    assert {"tensorflow", "tf-keras", "pyarrow", "pandas", "numpy", "hdfs"} <= pinned
    assert not {name for name in pinned if "airflow" in name or name in ("pyspark", "pyspark-client", "py4j")}
