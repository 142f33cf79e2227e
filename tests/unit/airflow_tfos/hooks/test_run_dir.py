"""How a run is named: its default run directory and its tag (pure functions)."""

from __future__ import annotations

from datetime import UTC, datetime

from airflow_tfos.hooks.run_dir import default_run_dir, run_tag


def test_runs_triggered_in_the_same_second_get_their_own_run_directory_and_tag():
    first = default_run_dir("/runs", "dag", "train", datetime(2026, 11, 21, 8, 0, 0, 123456, tzinfo=UTC), "m1")
    second = default_run_dir("/runs", "dag", "train", datetime(2026, 11, 21, 8, 0, 0, 654321, tzinfo=UTC), "m2")
    assert first != second and run_tag(first) != run_tag(second)
    assert first == default_run_dir("/runs", "dag", "train", datetime(2026, 11, 21, 8, 0, 0, 123456, tzinfo=UTC), "m1")


def test_mapped_task_instances_never_share_a_run_directory_or_a_tag():
    when = datetime(2026, 11, 21, tzinfo=UTC)
    dirs = [default_run_dir("/runs", "dag", "train", when, "r", map_index=i) for i in (-1, 0, 1, 2)]
    assert len(set(dirs)) == 4 and len({run_tag(d) for d in dirs}) == 4
    assert dirs[0] == default_run_dir("/runs", "dag", "train", when, "r")  # not mapped: no suffix
    assert dirs[2].endswith("-map1")


def test_without_a_logical_date_the_run_id_names_the_run():
    assert default_run_dir("/runs", "dag", "train", None, "manual__2026-11-21T08:00:00+00:00", map_index=0) == (
        "/runs/dag/train/manual__2026-11-21T08_00_00_00_00-map0"
    )
