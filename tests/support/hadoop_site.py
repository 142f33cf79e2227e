"""Write Hadoop ``*-site.xml`` files the way a cluster ships them (header, stylesheet, descriptions), for tests."""

from __future__ import annotations

from pathlib import Path
from xml.sax.saxutils import escape

_HEADER = """<?xml version="1.0" encoding="UTF-8"?>
<?xml-stylesheet type="text/xsl" href="configuration.xsl"?>
<!--
  Licensed under the Apache License, Version 2.0 (the "License");
  you may not use this file except in compliance with the License.
-->
<!-- Put site-specific property overrides in this file. -->
"""


def write_site(folder: Path, name: str, properties: dict[str, str], final: tuple[str, ...] = ()) -> Path:
    """Write ``folder/name`` holding ``properties`` (those in ``final`` marked final); return its path."""
    folder.mkdir(parents=True, exist_ok=True)
    lines = [_HEADER, "<configuration>"]
    for key, value in properties.items():
        lines += [
            "  <property>",
            f"    <name>{escape(key)}</name>",
            f"    <value>{escape(value)}</value>",
            f"    <description>set by the cluster's deployment for {escape(key)}</description>",
        ]
        if key in final:
            lines.append("    <final>true</final>")
        lines.append("  </property>")
    lines.append("</configuration>\n")
    path = folder / name
    path.write_text("\n".join(lines))
    return path


def ha_cluster_conf(
    folder: Path, *, nameservice: str, namenodes: list[str], rms: list[str], https: bool = False
) -> Path:
    """A cluster's configuration folder: an HA nameservice (``nn1``, ``nn2``... at ``namenodes``, host:port)
    and HA ResourceManagers (``rm1``, ``rm2``... at ``rms``, host:port); HTTPS policies when ``https``."""
    kind = "https-address" if https else "http-address"
    write_site(
        folder,
        "core-site.xml",
        {"fs.defaultFS": f"hdfs://{nameservice}", "hadoop.security.authentication": "simple"},
        final=("fs.defaultFS",),
    )
    hdfs = {
        "dfs.nameservices": nameservice,
        f"dfs.ha.namenodes.{nameservice}": ",".join(f"nn{i + 1}" for i in range(len(namenodes))),
        "dfs.http.policy": "HTTPS_ONLY" if https else "HTTP_ONLY",
        "dfs.replication": "3",
    }
    for i, address in enumerate(namenodes):
        hdfs[f"dfs.namenode.rpc-address.{nameservice}.nn{i + 1}"] = address.split(":")[0] + ":8020"
        hdfs[f"dfs.namenode.{kind}.{nameservice}.nn{i + 1}"] = address
    write_site(folder, "hdfs-site.xml", hdfs)
    web = "webapp.https.address" if https else "webapp.address"
    yarn = {
        "yarn.resourcemanager.ha.enabled": "true",
        "yarn.resourcemanager.cluster-id": "emulated-cluster",
        "yarn.resourcemanager.ha.rm-ids": ",".join(f"rm{i + 1}" for i in range(len(rms))),
        "yarn.http.policy": "HTTPS_ONLY" if https else "HTTP_ONLY",
    }
    for i, address in enumerate(rms):
        yarn[f"yarn.resourcemanager.hostname.rm{i + 1}"] = address.split(":")[0]
        yarn[f"yarn.resourcemanager.{web}.rm{i + 1}"] = address
    write_site(folder, "yarn-site.xml", yarn)
    return folder
