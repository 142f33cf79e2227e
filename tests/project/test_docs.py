"""The documentation cannot drift from the code: snippets, arguments, defaults and errors are checked here.

No Spark, no Airflow stack: files are parsed and classes introspected.

- A fenced ``python`` block in ``docs/operators/*.md`` or ``docs/sensors.md`` that follows a
  ``<!-- from example_dags/NAME.py -->`` line appears verbatim (line by line, indentation aside) in that
  example DAG, which the DAG tests parse and run.
- Every operator and sensor the package exports has a page (``docs/operators/*.md`` whose title is the class,
  or a ``## Class`` section of ``docs/sensors.md``) naming every argument of its ``__init__`` (its own and its
  airflow-tfos bases'), in backticks; each row of its argument table (``| Argument | Default | Meaning |``)
  shows the real default.
- Links between the pages reach a page and a heading; the README links every page.
- ``docs/troubleshooting.md`` names every public error class of the errors modules, and each message it quotes
  (the pieces between ``…``) is in the package's source.
"""

from __future__ import annotations

import inspect
import re
import textwrap
from pathlib import Path

import pytest

from tests.conftest import REPO

DOCS = REPO / "docs"
FROM_EXAMPLE = re.compile(r"<!-- from (example_dags/[\w/]+\.py) -->\s*\n```python\n(.*?)\n```", re.DOTALL)
ARGUMENT_TABLE = re.compile(r"^\| Argument \| Default \| Meaning \|\n\|[-|]+\|\n((?:\|.*\n?)*)", re.MULTILINE)
ROW = re.compile(r"^\| `(\w+)` \| (.+?) \|", re.MULTILINE)
#: Defaults read from Airflow's configuration when the DAG is parsed: the table names the setting.
CONFIGURED_DEFAULTS = {
    "deferrable": "`[operators] default_deferrable`",
    "local_paths_shared": "`[tfos] local_paths_shared`",
}


def lines_of(text: str) -> list[str]:
    return [line.strip() for line in textwrap.dedent(text).splitlines() if line.strip()]


def contains_lines(haystack: list[str], needle: list[str]) -> bool:
    return any(haystack[i : i + len(needle)] == needle for i in range(len(haystack) - len(needle) + 1))


def example_snippets(page: Path) -> list[tuple[str, str]]:
    return FROM_EXAMPLE.findall(page.read_text())


def pages() -> list[Path]:
    return [*sorted((DOCS / "operators").glob("*.md")), DOCS / "sensors.md"]


@pytest.mark.parametrize("page", pages(), ids=lambda p: p.name)
def test_every_page_has_example_snippets_that_are_verbatim_in_their_example_dag(page):
    snippets = example_snippets(page)
    assert snippets, f"{page.relative_to(REPO)} has no snippet marked <!-- from example_dags/... -->"
    fenced = page.read_text().count("```python")
    assert fenced == len(snippets), f"{page.relative_to(REPO)}: every python snippet must say which example it is from"
    for source, snippet in snippets:
        example = REPO / source
        assert example.is_file(), f"{page.relative_to(REPO)} quotes {source}, which does not exist"
        assert contains_lines(lines_of(example.read_text()), lines_of(snippet)), (
            f"{page.relative_to(REPO)}: a snippet is not in {source} (copy it from there again):\n{snippet}"
        )


def test_the_snippet_check_fails_on_a_changed_line():
    example = lines_of((REPO / "example_dags/example_tfos_nightly.py").read_text())
    snippet = lines_of('    train = TFoSTrainOperator(\n        task_id="train",\n        spark_conn_id=SPARK_CONN,\n')
    assert contains_lines(example, snippet)
    assert not contains_lines(example, [*snippet[:-1], "spark_conn_id='other',"])


def exported_classes() -> list[type]:
    import airflow_tfos.operators
    import airflow_tfos.sensors

    return [getattr(m, name) for m in (airflow_tfos.operators, airflow_tfos.sensors) for name in m.__all__]


def own_arguments(cls: type) -> dict[str, inspect.Parameter]:
    """The ``__init__`` arguments of ``cls`` and its airflow-tfos bases (not Airflow's BaseOperator's)."""
    found: dict[str, inspect.Parameter] = {}
    for klass in reversed(cls.__mro__):
        if klass.__module__.startswith("airflow_tfos.") and "__init__" in vars(klass):
            for name, param in inspect.signature(klass.__init__).parameters.items():
                if name != "self" and param.kind is not inspect.Parameter.VAR_KEYWORD:
                    found[name] = param
    return found


def page_of(cls: type) -> tuple[Path, str]:
    if cls.__module__.startswith("airflow_tfos.sensors"):
        text = (DOCS / "sensors.md").read_text()
        match = re.search(rf"^## `{cls.__name__}`\n(.*?)(?=^## |\Z)", text, re.DOTALL | re.MULTILINE)
        assert match, f"docs/sensors.md has no section '## `{cls.__name__}`'"
        return DOCS / "sensors.md", match.group(1)
    for page in sorted((DOCS / "operators").glob("*.md")):
        text = page.read_text()
        if text.startswith(f"# `{cls.__name__}`\n"):
            return page, text
    raise AssertionError(f"no page in docs/operators/ has the title '# `{cls.__name__}`': write one")


def documented_default(param: inspect.Parameter) -> str:
    if param.name in CONFIGURED_DEFAULTS:
        return CONFIGURED_DEFAULTS[param.name]
    if param.default is inspect.Parameter.empty:
        return "required"
    return f"`{param.default!r}`"


@pytest.mark.parametrize("cls", exported_classes(), ids=lambda c: c.__name__)
def test_every_exported_operator_and_sensor_has_a_page_naming_each_argument_with_its_default(cls):
    page, text = page_of(cls)
    arguments = own_arguments(cls)
    assert arguments
    missing = [name for name in arguments if f"`{name}`" not in text]
    assert not missing, f"{page.relative_to(REPO)} does not mention {cls.__name__}'s argument(s) {missing}"
    rows = [row for table in ARGUMENT_TABLE.findall(text) for row in ROW.findall(table)]
    assert rows, f"{page.relative_to(REPO)} has no table '| Argument | Default | Meaning |' for {cls.__name__}"
    for name, default in rows:
        assert name in arguments, f"{page.relative_to(REPO)} documents {name!r}, not an argument of {cls.__name__}"
        assert default == documented_default(arguments[name]), (
            f"{page.relative_to(REPO)}: {cls.__name__}'s {name!r} defaults to "
            f"{documented_default(arguments[name])}, the page says {default}"
        )


def test_an_argument_without_docs_is_found():
    class Documented:
        def __init__(self, *, alpha: int = 1, **kwargs):
            pass

    Documented.__module__ = "airflow_tfos.operators.example"
    arguments = own_arguments(Documented)
    assert list(arguments) == ["alpha"] and documented_default(arguments["alpha"]) == "`1`"


def public_errors() -> list[str]:
    import airflow_tfos.hooks.errors
    import airflow_tfos.hooks.hadoop_conf
    import airflow_tfos.runtime.errors
    import airflow_tfos.shared.errors

    modules = (airflow_tfos.shared.errors, airflow_tfos.runtime.errors, airflow_tfos.hooks.errors)
    names = [n for m in modules for n in m.__all__ if isinstance(getattr(m, n), type)]
    return [*names, airflow_tfos.hooks.hadoop_conf.HadoopConfError.__name__]


def test_troubleshooting_names_every_public_error_class():
    text = (DOCS / "troubleshooting.md").read_text()
    missing = [name for name in public_errors() if f"`{name}`" not in text]
    assert not missing, f"docs/troubleshooting.md does not mention {missing}"


def test_troubleshooting_quotes_messages_the_package_raises():
    source = "\n".join(p.read_text() for p in (REPO / "airflow_tfos").rglob("*.py"))
    quotes = re.findall(r"^Message: \"(.+)\"$", (DOCS / "troubleshooting.md").read_text(), re.MULTILINE)
    assert len(quotes) >= 20
    for quote in quotes:
        for piece in quote.split("…"):
            assert piece.strip() in source, f"docs/troubleshooting.md quotes {piece.strip()!r}, which no module says"


def test_the_readme_links_every_page():
    readme = (REPO / "README.md").read_text()
    for page in ["installation.md", "connections.md", "sensors.md", "troubleshooting.md"]:
        assert f"(docs/{page})" in readme, f"README.md does not link docs/{page}"
    for page in (DOCS / "operators").glob("*.md"):
        assert f"(docs/operators/{page.name})" in readme, f"README.md does not link docs/operators/{page.name}"


def anchor(heading: str) -> str:
    """GitHub's anchor of a Markdown heading."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_links_between_the_pages_reach_a_page_and_a_heading():
    """Every link of the README and of every page under docs/ to a file of the repository reaches it, and its
    #fragment a heading there."""
    pages = [REPO / "README.md", *sorted(DOCS.glob("*.md")), *sorted((DOCS / "operators").glob("*.md"))]
    for page in pages:
        for target in re.findall(r"\]\(([^)\s]+)\)", page.read_text()):
            if "://" in target:
                continue
            path, _, fragment = target.partition("#")
            linked = (page.parent / path).resolve() if path else page
            assert linked.is_file(), f"{page.relative_to(REPO)} links {target}, which does not exist"
            if fragment:
                headings = re.findall(r"^#+ (.+)$", linked.read_text(), re.MULTILINE)
                assert fragment in {anchor(h) for h in headings}, f"{page.relative_to(REPO)} links {target}: no heading"


def test_anchor_is_githubs():
    assert anchor("## `TFoSCheckpointSensor`".lstrip("# ")) == "tfoscheckpointsensor"
    assert anchor("Storage and HDFS") == "storage-and-hdfs"


#: A file a page shows whole: ``<!-- file docs/quickstart/my_dag.py -->`` before its block.
WHOLE_FILE = re.compile(r"<!-- file ((?:docs|example_dags)/[\w/]+\.py) -->\s*\n```python\n(.*?)\n```", re.DOTALL)


def test_the_quickstart_shows_its_dag_folder_whole_as_the_suite_runs_it():
    """docs/quickstart/ is the DAG folder tests/integration/hadoop/test_quickstart.py runs on the Hadoop lab: the page
    shows each of its files whole, byte for byte."""
    shown = dict(WHOLE_FILE.findall((DOCS / "quickstart-yarn.md").read_text()))
    folder = {f"docs/quickstart/{p.name}" for p in (DOCS / "quickstart").glob("*.py")}
    assert set(shown) == folder == {"docs/quickstart/my_training.py", "docs/quickstart/my_dag.py"}
    for path, block in shown.items():
        assert block + "\n" == (REPO / path).read_text(), f"docs/quickstart-yarn.md shows {path} otherwise than it is"
