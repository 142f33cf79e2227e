"""How the HDFS settings travel in an environment variable: as YARN's launch script sets it."""

from __future__ import annotations

import subprocess

import pytest

from airflow_tfos.shared.errors import WebHDFSConfigError
from airflow_tfos.shared.storage.webhdfs_config import WEBHDFS_ENV, WebHDFSConfig, env_value


def through_launch_script(value: str) -> str:
    """What a container sees of ``value``: YARN writes ``export NAME="value"`` into its launch script, unescaped."""
    script = f'export {WEBHDFS_ENV}="{value}"\nprintf %s "${WEBHDFS_ENV}"'
    return subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=True).stdout


def test_the_settings_reach_a_yarn_container_whole_only_encoded():
    config = WebHDFSConfig(namenodes=("http://nn-a:9870", "http://nn-b:9870"), user="etl", nameservice="prod")
    text = config.to_json()

    assert through_launch_script(text) != text  # the quotes of plain JSON are lost on the way
    arrived = through_launch_script(env_value(text))
    assert WebHDFSConfig.from_env({WEBHDFS_ENV: arrived}) == config
    assert WebHDFSConfig.from_env({WEBHDFS_ENV: text}) == config  # plain JSON (set by hand) is still read


def test_a_damaged_encoded_value_names_the_variable():
    with pytest.raises(WebHDFSConfigError, match=f"{WEBHDFS_ENV}: base64: is followed by no valid base64"):
        WebHDFSConfig.from_env({WEBHDFS_ENV: "base64:{not base64}"})
