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
