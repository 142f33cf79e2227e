"""Building the lab: where Maven Central cannot be reached, the error names the artifact Maven could not fetch."""

from __future__ import annotations

import pytest

from airflow_tfos.testing.ports import free_port
from tests.integration.hadoop.conftest import hadoop

pytestmark = pytest.mark.real_hadoop


def test_a_build_that_cannot_reach_maven_central_names_the_artifact_and_what_to_do(tmp_path):
    settings = tmp_path / "settings.xml"  # every repository mirrored to a port where nothing listens
    settings.write_text(
        "<settings><mirrors><mirror><id>nowhere</id><mirrorOf>*</mirrorOf>"
        f"<url>http://127.0.0.1:{free_port()}/maven2</url></mirror></mirrors></settings>"
    )
    with pytest.raises(hadoop.LabError) as failure:
        hadoop.build(["-s", str(settings), f"-Dmaven.repo.local={tmp_path / 'm2'}"])
    message = str(failure.value)
    assert "Could not transfer artifact org.apache.maven.plugins:" in message, message
    assert "Maven Central (https://repo.maven.apache.org/maven2) must be reachable" in message


def test_a_built_archive_is_reused_only_while_its_bytes_and_owner_are_what_was_recorded(tmp_path):
    # The jars zip and the packed environment decide what runs in every container: hadoop_spark.py reuses one only
    # if it is this user's alone to write and its bytes are those it built.
    import importlib.util

    from tests.conftest import REPO

    spec = importlib.util.spec_from_file_location("hadoop_lab_spark", REPO / "scripts" / "hadoop_spark.py")
    spark = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(spark)
    folder = tmp_path / "target"
    folder.mkdir(mode=0o755)
    folder.chmod(0o755)
    built = folder / "packed-env-link-abc.tar"
    built.write_bytes(b"the archive as built")
    built.chmod(0o644)
    assert not spark.reusable(built)  # no digest recorded: built again
    spark.record(built)
    assert spark.reusable(built)

    built.write_bytes(b"the archive as changed")  # another process, or a half-written copy
    assert not spark.reusable(built)
    spark.record(built)
    built.chmod(0o664)  # the group may write it
    assert not spark.reusable(built)
    built.chmod(0o644)
    folder.chmod(0o777)  # anyone may replace it
    assert not spark.reusable(built)
    folder.chmod(0o755)
    assert spark.reusable(built)
