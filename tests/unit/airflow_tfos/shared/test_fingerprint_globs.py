"""Fingerprints of glob inputs: every matched file counts, keyed by its path below the glob's fixed prefix, so
that files of the same name in different folders (``day=*/part-00000.parquet``) are told apart; the
fingerprints of plain paths are the ones earlier versions recorded (no rerun trains again for nothing).

No Spark, no TF; the WebHDFS case runs through the protocol emulator."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from airflow_tfos.shared.fingerprint import changes, files_fingerprint, run_fingerprint
from airflow_tfos.shared.storage import LocalStorage
from airflow_tfos.shared.storage.webhdfs_client import WebHDFSStorage

#: (relative path, size, modification time in seconds) of a small partitioned input
LAYOUT = (
    ("day=1/part-00000.parquet", 10, 1_700_000_000),
    ("day=2/part-00000.parquet", 20, 1_700_000_100),
    ("part-9.parquet", 5, 1_700_000_200),
)


def write_layout(folder: Path) -> None:
    for name, size, when in LAYOUT:
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"r" * size)
        os.utime(path, (when, when))


def glob_spec(folder: Path) -> dict:
    return {"data": {"format": "parquet", "path": f"{folder}/day=*/part-00000.parquet"}}


def test_files_of_the_same_name_in_matched_folders_are_each_counted_by_their_path(tmp_path):
    write_layout(tmp_path)
    found = files_fingerprint(f"{tmp_path}/day=*/part-00000.parquet", LocalStorage())
    assert found["files"] == {
        "day=1/part-00000.parquet": [10, 1_700_000_000_000],
        "day=2/part-00000.parquet": [20, 1_700_000_100_000],
    }
    assert (found["count"], found["bytes"]) == (2, 30)


@pytest.mark.parametrize("which", ["day=1", "day=2"])
def test_rewriting_any_matched_file_changes_the_fingerprint_and_is_named(tmp_path, which):
    write_layout(tmp_path)
    before = run_fingerprint(glob_spec(tmp_path))
    rewritten = tmp_path / which / "part-00000.parquet"
    stat = rewritten.stat()
    os.utime(rewritten, ns=(stat.st_atime_ns, stat.st_mtime_ns + 5_000_000_000))  # same size, later time
    after = run_fingerprint(glob_spec(tmp_path))
    assert after["hash"] != before["hash"]
    (line,) = changes(before, after)
    assert f"1 changed (e.g. {which}/part-00000.parquet modified " in line


def test_a_glob_in_the_middle_keeps_the_folders_below_its_fixed_prefix(tmp_path):
    write_layout(tmp_path / "2026")
    found = files_fingerprint(f"{tmp_path}/20*/day=*/part-00000.parquet", LocalStorage())
    assert sorted(found["files"]) == ["2026/day=1/part-00000.parquet", "2026/day=2/part-00000.parquet"]


def test_plain_paths_keep_the_fingerprints_earlier_versions_recorded(tmp_path):
    """A changed fingerprint makes every rerun train again once: plain paths must hash as they always did."""
    write_layout(tmp_path)
    assert files_fingerprint(str(tmp_path), LocalStorage())["hash"] == "ade439fb2d5ef665"
    spec = {"data": {"format": "parquet", "path": str(tmp_path)}, "code": {"hash": "c0de", "packages": ["m"]}}
    assert run_fingerprint(spec)["hash"] == "38b0cca9050c65dc"
    one_file = files_fingerprint(str(tmp_path / "part-9.parquet"), LocalStorage())
    assert one_file["files"] == {"part-9.parquet": [5, 1_700_000_200_000]}


def test_a_webhdfs_glob_is_keyed_by_path_below_its_prefix(emu):
    storage = WebHDFSStorage(emu.config())
    base = emu.uri("/data")
    for day, size in (("day=1", 10), ("day=2", 20)):
        storage.write_bytes(f"{base}/{day}/part-00000.parquet", b"x" * size)
    before = files_fingerprint(f"{base}/day=*/part-00000.parquet", storage)
    assert {name: entry[0] for name, entry in before["files"].items()} == {
        "day=1/part-00000.parquet": 10,
        "day=2/part-00000.parquet": 20,
    }
    folders = files_fingerprint(f"{base}/day=*", storage)
    assert folders["files"] == before["files"]
    storage.write_bytes(f"{base}/day=1/part-00000.parquet", b"y" * 11)
    assert files_fingerprint(f"{base}/day=*/part-00000.parquet", storage)["hash"] != before["hash"]
    assert files_fingerprint(f"{base}/day=*", storage)["hash"] != folders["hash"]


def test_a_glob_that_matches_folders_counts_the_files_under_them(tmp_path):
    """``day=*`` names folders: Spark reads the files in them, so they are what the fingerprint lists."""
    write_layout(tmp_path)
    (tmp_path / "day=1" / "_SUCCESS").write_bytes(b"")
    (tmp_path / "_temporary" / "day=3").mkdir(parents=True)
    before = run_fingerprint({"data": {"format": "parquet", "path": f"{tmp_path}/day=*"}})
    assert sorted(before["inputs"]["data"]["files"]) == ["day=1/part-00000.parquet", "day=2/part-00000.parquet"]
    rewritten = tmp_path / "day=1" / "part-00000.parquet"
    rewritten.write_bytes(b"s" * 11)
    after = run_fingerprint({"data": {"format": "parquet", "path": f"{tmp_path}/day=*"}})
    assert after["hash"] != before["hash"]
    mixed = files_fingerprint(f"{tmp_path}/*", LocalStorage())  # a file and folders at once
    assert sorted(mixed["files"]) == ["day=1/part-00000.parquet", "day=2/part-00000.parquet", "part-9.parquet"]
