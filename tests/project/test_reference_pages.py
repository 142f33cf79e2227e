"""The reference pages cannot drift from the code they describe.

- ``docs/training-function.md`` names every public member of ``NodeContext`` (fields, properties, methods,
  TensorFlowOnSpark's aliases) in one table, and no member the class does not have.
- ``docs/data.md`` names every key the spec accepts in ``data`` and in ``feed`` (read from the spec's own
  constants and the ``Feed`` dataclass), and shows each ``feed`` key's real default.
- The Python snippets of every page (the README, docs/ and docs/operators/) parse, and import only names that
  exist (their links: tests/project/test_docs.py).

No Spark, no TensorFlow: the pages are parsed and the classes introspected.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib
import inspect
import json
import re

import pytest

from tests.conftest import REPO

DOCS = REPO / "docs"
TRAINING_FUNCTION = DOCS / "training-function.md"
DATA = DOCS / "data.md"
#: The first cell of a table row, when it starts with a backticked name (``| `dataset(split="train")` |``).
FIRST_CELL_NAME = re.compile(r"^\|\s*`(\w+)")
SNIPPET = re.compile(r"^```python\n(.*?)^```", re.DOTALL | re.MULTILINE)
HEADING = re.compile(r"^(#+) (.+)$", re.MULTILINE)


# --- reading the pages ---------------------------------------------------------------------------------------------


def section(text: str, heading: str) -> str:
    """The part of ``text`` under the heading line ``heading`` (``## The `data` dict``), up to the next heading."""
    lines = text.splitlines()
    assert heading in lines, f"no heading {heading!r}"
    start = lines.index(heading) + 1
    end = next((i for i in range(start, len(lines)) if HEADING.match(lines[i])), len(lines))
    return "\n".join(lines[start:end])


def first_table(text: str, header: str) -> list[list[str]]:
    """The rows (as cells) of the first table in ``text`` whose header line is ``header``, header excluded."""
    lines = text.splitlines()
    assert header in lines, f"no table with the header {header!r}"
    rows = []
    for line in lines[lines.index(header) + 2 :]:  # after the header and its |---| line
        if not line.startswith("|"):
            break
        rows.append(line)
    return [[cell.strip() for cell in row.strip().strip("|").split(" | ")] for row in rows]


def named_rows(rows: list[list[str]]) -> dict[str, list[str]]:
    """Each row by the name its first cell starts with, in backticks."""
    named = {}
    for cells in rows:
        found = FIRST_CELL_NAME.match("| " + cells[0])
        assert found, f"a row's first cell names nothing in backticks: {cells[0]!r}"
        named[found.group(1)] = cells
    return named


def missing(documented: dict[str, list[str]], expected: list[str]) -> list[str]:
    """The expected names that no row documents."""
    return sorted(set(expected) - set(documented))


def without_row(text: str, name: str) -> str:
    """``text`` with the table row whose first cell names ``name`` left out."""
    kept = [line for line in text.splitlines() if not line.startswith(f"| `{name}`")]
    assert len(kept) < len(text.splitlines()), f"no row for {name!r}"
    return "\n".join(kept)


# --- NodeContext ---------------------------------------------------------------------------------------------------

MEMBER_HEADER = "| Member | Kind | Meaning |"


def node_context_members() -> list[str]:
    """The public members of ``NodeContext``: what ``dir()`` sees (methods, properties, fields with a default at
    class level) and every dataclass field (those without a class-level default are not attributes of the class)."""
    from airflow_tfos.runtime.program.context import NodeContext

    names = {name for name, _ in inspect.getmembers(NodeContext)} | {f.name for f in dataclasses.fields(NodeContext)}
    return sorted(name for name in names if not name.startswith("_"))


def member_rows(text: str) -> dict[str, list[str]]:
    return named_rows(first_table(text, MEMBER_HEADER))


def test_the_nodecontext_table_names_every_public_member_and_no_other():
    members = node_context_members()
    assert {"dataset", "steps_per_epoch", "is_chief", "executor_id", "worker_num", "defaultFS"} <= set(members)
    rows = member_rows(TRAINING_FUNCTION.read_text())
    assert not missing(rows, members), f"docs/training-function.md lacks NodeContext's {missing(rows, members)}"
    extra = sorted(set(rows) - set(members))
    assert not extra, f"docs/training-function.md documents {extra}, which NodeContext does not have"


def test_the_member_check_finds_a_member_left_out():
    text = without_row(TRAINING_FUNCTION.read_text(), "steps_per_epoch")
    assert missing(member_rows(text), node_context_members()) == ["steps_per_epoch"]


def test_the_member_check_finds_a_field_without_a_class_level_default():
    """``executor_id`` has no default, so ``dir(NodeContext)`` does not list it: the check finds it all the same."""
    from airflow_tfos.runtime.program.context import NodeContext

    assert "executor_id" not in dir(NodeContext)
    text = without_row(TRAINING_FUNCTION.read_text(), "executor_id")
    assert missing(member_rows(text), node_context_members()) == ["executor_id"]


# --- the data dict and the feed keys -------------------------------------------------------------------------------

KEY_HEADER = "| Key | Default | Meaning |"
DATA_HEADING = "## The `data` dict"
FEED_HEADING = "## The `feed` dict"


def data_keys() -> list[str]:
    """The keys the spec accepts in ``data`` (and ``validation_data``)."""
    from airflow_tfos.shared import spec

    return sorted(spec._DATA_FIELDS)


def feed_keys() -> list[str]:
    """The keys the spec accepts in ``feed``: its own list, and the ``Feed`` fields it builds from them."""
    from airflow_tfos.shared import spec
    from airflow_tfos.shared.feed import Feed

    return sorted(set(spec._FEED_FIELDS) | {f.name for f in dataclasses.fields(Feed)})


def key_rows(text: str, heading: str) -> dict[str, list[str]]:
    return named_rows(first_table(section(text, heading), KEY_HEADER))


@pytest.mark.parametrize(("heading", "keys"), [(DATA_HEADING, data_keys), (FEED_HEADING, feed_keys)])
def test_data_md_names_every_key_the_spec_accepts_and_no_other(heading, keys):
    rows = key_rows(DATA.read_text(), heading)
    expected = keys()
    assert not missing(rows, expected), f"docs/data.md, {heading!r}: no row for {missing(rows, expected)}"
    extra = sorted(set(rows) - set(expected))
    assert not extra, f"docs/data.md, {heading!r}: rows for {extra}, which the spec does not accept"


@pytest.mark.parametrize(
    ("heading", "keys", "key"), [(DATA_HEADING, data_keys, "options"), (FEED_HEADING, feed_keys, "shuffle_window")]
)
def test_the_key_check_finds_a_key_left_out(heading, keys, key):
    text = without_row(DATA.read_text(), key)
    assert missing(key_rows(text, heading), keys()) == [key]


def documented_default(field: dataclasses.Field) -> str:
    """A ``Feed`` field's default as data.md shows it: its JSON in backticks, or ``required``."""
    if field.default is not dataclasses.MISSING:
        value = field.default
    elif field.default_factory is not dataclasses.MISSING:
        value = field.default_factory()
    else:
        return "required"
    return f"`{json.dumps(list(value) if isinstance(value, tuple) else value)}`"


def test_data_md_shows_the_real_default_of_each_feed_key():
    from airflow_tfos.shared.feed import Feed

    rows = key_rows(DATA.read_text(), FEED_HEADING)
    for field in dataclasses.fields(Feed):
        assert rows[field.name][1] == documented_default(field), (
            f"docs/data.md: feed key {field.name!r} defaults to {documented_default(field)}, the page says "
            f"{rows[field.name][1]}"
        )


# --- snippets and links --------------------------------------------------------------------------------------------

#: Every page: its Python snippets parse and import only what exists (those copied from an example DAG, marked
#: ``<!-- from example_dags/... -->``, are fragments held to their DAG by tests/project/test_docs.py instead).
PAGES = [REPO / "README.md", *sorted(DOCS.glob("*.md")), *sorted((DOCS / "operators").glob("*.md"))]
WHOLE_SNIPPET = re.compile(r"(<!-- from [^>]*-->\s*\n)?^```python\n(.*?)^```", re.DOTALL | re.MULTILINE)


def unknown_imports(source: str) -> list[str]:
    """The ``airflow_tfos`` names a snippet imports that do not exist (a snippet that does not parse raises)."""
    unknown = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "airflow_tfos":
            try:
                module = importlib.import_module(node.module)
            except ImportError:
                unknown.append(node.module)
                continue
            unknown += [f"{node.module}.{a.name}" for a in node.names if not hasattr(module, a.name)]
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "airflow_tfos":
                    try:
                        importlib.import_module(alias.name)
                    except ImportError:
                        unknown.append(alias.name)
    return unknown


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_the_snippets_parse_and_import_only_names_that_exist(page):
    snippets = [block for marker, block in WHOLE_SNIPPET.findall(page.read_text()) if not marker]
    if page in (TRAINING_FUNCTION, DATA):
        assert snippets, f"{page.relative_to(REPO)} has no python snippet"
    for snippet in snippets:
        try:
            bad = unknown_imports(snippet)
        except SyntaxError as exc:
            raise AssertionError(
                f"{page.relative_to(REPO)}: a snippet is not valid Python ({exc}):\n{snippet}"
            ) from None
        assert not bad, f"{page.relative_to(REPO)}: a snippet imports {bad}, which do not exist:\n{snippet}"


def test_the_snippet_check_finds_a_name_that_does_not_exist():
    assert unknown_imports("from airflow_tfos.runtime import RunCheckpointer, NoSuchThing\n") == [
        "airflow_tfos.runtime.NoSuchThing"
    ]
    assert unknown_imports("import airflow_tfos.no_such_module\n") == ["airflow_tfos.no_such_module"]
    with pytest.raises(SyntaxError):
        unknown_imports("train(task_id='x', ...,)\nf(a=1, 2)\n")
