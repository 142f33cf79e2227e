"""A packed Python environment for YARN containers, built from this interpreter's installed packages.

What ``venv-pack`` or ``conda-pack`` make on a user's machine: a virtual environment as one archive, shipped
with ``--archives env.tar#environment`` and run as ``./environment/bin/python`` (``TFoSHook(packed_env=...)``).
It holds the distributions that ``airflow-tfos[runtime]`` requires, and what they require, but neither
``airflow_tfos`` (the driver and the nodes get the runtime from the zip that the hook ships) nor ``pyspark``
(Spark puts its own ``pyspark.zip`` and py4j on the containers' ``PYTHONPATH``). So a run on YARN proves that
the shipped zips are complete: a module missing from them fails there, as it would on a user's cluster.

Two modes:

- ``copy``: the files themselves (hard links where the file system allows); relocatable to any host with the
  same Python at the path ``bin/python`` links to, as ``venv-pack`` makes it. TensorFlow makes this about
  2.4 GB, which each NodeManager copies and unpacks.
- ``link``: symbolic links to the installed files, for containers on this machine only (the Hadoop lab's):
  the same import behaviour, a few MB to ship and unpack.

    python -m airflow_tfos.testing.packed_env OUT.tar [--mode copy|link]
    python -m airflow_tfos.testing.packed_env --requirements    # requirements/runtime.txt, the same packages
"""

from __future__ import annotations

import argparse
import importlib.metadata as metadata
import logging
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from packaging.requirements import Requirement

log = logging.getLogger(__name__)

#: What the containers must not find installed: the project itself (it comes as the shipped runtime zip) and
#: Spark's Python (Spark ships its own with the application).
LEFT_OUT = ("airflow-tfos", "pyspark", "pyspark-client", "py4j")
MODES = ("copy", "link")


class PackedEnvError(RuntimeError):
    """The environment could not be built as asked; the message says what is missing."""


def _key(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def runtime_distributions(extra: str = "runtime") -> list[metadata.Distribution]:
    """The installed distributions ``airflow-tfos[extra]`` needs on the containers, dependencies included."""
    try:
        project = metadata.distribution("airflow-tfos")
    except metadata.PackageNotFoundError as error:
        raise PackedEnvError("airflow-tfos is not installed here: its [runtime] extra names what to pack") from error
    roots = [
        Requirement(r)
        for r in project.requires or []
        if Requirement(r).marker is not None and Requirement(r).marker.evaluate({"extra": extra})
    ]
    found: dict[str, metadata.Distribution] = {}
    pending = [r.name for r in roots]
    while pending:
        name = pending.pop()
        if _key(name) in found or _key(name) in LEFT_OUT:
            continue
        try:
            distribution = metadata.distribution(name)
        except metadata.PackageNotFoundError as error:
            raise PackedEnvError(f"{name} (needed by airflow-tfos[{extra}]) is not installed here") from error
        found[_key(name)] = distribution
        for text in distribution.requires or []:
            requirement = Requirement(text)
            if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
                pending.append(requirement.name)
    return sorted(found.values(), key=lambda d: _key(d.metadata["Name"]))


def requirements(extra: str = "runtime") -> str:
    """``requirements/runtime.txt``: every distribution :func:`runtime_distributions` packs, pinned at the version
    installed here (what the tests ran with); neither Airflow nor pyspark among them."""
    lines = [f"{d.metadata['Name']}=={d.version}" for d in runtime_distributions(extra)]
    header = (
        "# What the Spark side needs in a packed environment (the driver's and executors' Python on YARN): the\n"
        f"# packages of airflow-tfos[{extra}] and what they need, pinned; no Airflow, no pyspark (the cluster's Spark\n"
        "# brings its own), not airflow-tfos itself (the operators ship it). Written by\n"
        "#     python -m airflow_tfos.testing.packed_env --requirements > requirements/runtime.txt\n"
    )
    return header + "\n".join(sorted(lines, key=str.lower)) + "\n"


def _site_packages(env: Path) -> Path:
    return env / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"


def _place(source: Path, target: Path, mode: str) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    if mode == "link":
        target.symlink_to(source.resolve())
        return
    try:
        os.link(source, target)
    except OSError:
        shutil.copy2(source, target)


def populate(env: Path, distributions: list[metadata.Distribution], mode: str) -> int:
    """Put each distribution's files that live in site-packages (by its RECORD) into ``env``; return how many."""
    site = _site_packages(env)
    placed = 0
    for distribution in distributions:
        root = Path(distribution.locate_file(""))
        for entry in distribution.files or []:
            source = Path(distribution.locate_file(entry))
            relative = Path(os.path.normpath(entry))
            if relative.parts[0] == ".." or "__pycache__" in relative.parts or not source.is_file():
                continue  # scripts in bin/, and byte code that Python writes again
            target = site / relative
            if not target.exists():
                _place(root / relative, target, mode)
                placed += 1
    return placed


def check(env: Path) -> None:
    """Fail unless the environment's Python imports the runtime's packages and not the project or pyspark."""
    probe = (
        "import importlib.util, sys\n"
        "for name in ('tensorflow', 'pyarrow', 'pandas', 'cloudpickle', 'hdfs'):\n"
        "    assert importlib.util.find_spec(name), name + ' is missing'\n"
        "for name in ('airflow_tfos', 'pyspark', 'airflow'):\n"
        "    assert importlib.util.find_spec(name) is None, name + ' must not be installed'\n"
    )
    clean = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    done = subprocess.run(
        [str(env / "bin" / "python"), "-c", probe], env=clean, cwd=env, capture_output=True, text=True
    )
    if done.returncode != 0:
        raise PackedEnvError(f"the packed environment is not as expected: {done.stderr.strip().splitlines()[-1]}")


def build(
    out: str | Path, *, mode: str = "copy", extras: tuple[str, ...] = ("runtime",)
) -> dict[str, float | int | str]:
    """Build the packed environment of ``airflow-tfos[extras]`` as the tar file ``out``; return what it holds and
    how long it took."""
    if mode not in MODES:
        raise PackedEnvError(f"mode must be one of {', '.join(MODES)}, not {mode!r}")
    out = Path(out).resolve()
    started = time.monotonic()
    distributions = list({_key(d.metadata["Name"]): d for e in extras for d in runtime_distributions(e)}.values())
    with tempfile.TemporaryDirectory(prefix="packed-env-", dir=out.parent) as work:
        env = Path(work) / "env"
        # the base interpreter (not this virtual environment's): bin/python links to it, as venv-pack leaves it
        base = getattr(sys, "_base_executable", sys.executable)
        subprocess.run([base, "-m", "venv", "--without-pip", str(env)], check=True)
        files = populate(env, distributions, mode)
        check(env)
        partial = out.with_name(f".{out.name}.{os.getpid()}")
        subprocess.run(["tar", "-cf", str(partial), "-C", str(env), "."], check=True)
        partial.replace(out)
    summary = {
        "path": str(out),
        "mode": mode,
        "distributions": len(distributions),
        "files": files,
        "mib": round(out.stat().st_size / 2**20, 1),
        "seconds": round(time.monotonic() - started, 1),
    }
    log.info("packed environment %s", summary)
    return summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", nargs="?", help="the tar file to write")
    parser.add_argument("--requirements", action="store_true", help="print requirements/runtime.txt instead")
    parser.add_argument("--mode", choices=MODES, default="copy")
    parser.add_argument("--extra", action="append", help="the extras to pack (default: runtime)")
    options = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    if options.requirements:
        sys.stdout.write(requirements())
        return 0
    if not options.out:
        parser.error("name the tar file to write (or --requirements)")
    try:
        summary = build(options.out, mode=options.mode, extras=tuple(options.extra or ["runtime"]))
    except PackedEnvError as error:
        sys.stderr.write(f"error: {error}\n")
        return 1
    sys.stdout.write(" ".join(f"{k}={v}" for k, v in summary.items()) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
