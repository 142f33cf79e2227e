"""What the Airflow side asks of a run's Spark driver through the run directory: feeds and a graceful stop.

``<run_dir>/feeds/<id>.json`` asks a serving driver for a feed, ``<id>.done.json`` records that it was served.
Anyone who may write the run directory may write a request, so what the folder holds is checked before the
driver acts on it: a file whose name is not a feed id, or whose content names another feed than its name, is
skipped; one that is not a JSON object with a time of request is handed back marked ``invalid``, so that it is
answered with that error. ``<run_dir>/control/stop.json`` asks for a graceful stop, and :func:`stop_applies`
says which application it is meant for.

Kept apart from :mod:`airflow_tfos.shared.rundir`, whose :class:`~airflow_tfos.shared.rundir.RunDir` writes and
reads these files with these rules, as :mod:`airflow_tfos.shared.event_log` holds the rules of ``events/``.
"""

from __future__ import annotations

import json
import logging
import re
from typing import Any

from airflow_tfos.shared.errors import RunDirError
from airflow_tfos.shared.storage import Storage, is_plain_name, join

log = logging.getLogger(__name__)

_FEED_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")


def check_feed_id(feed_id: Any) -> str:
    """Return ``feed_id`` if it can name a feed's files, else raise ValueError saying what a feed id may hold."""
    if not isinstance(feed_id, str) or not _FEED_ID.match(feed_id):
        raise ValueError(
            f"feed id {feed_id!r} must be 1-128 letters, digits, '_', '-' or '.', starting with a letter or digit"
        )
    return feed_id


def _feed_request(feed_id: str, raw: bytes) -> dict[str, Any] | None:
    """A feed request file's content, with its id; marked ``invalid`` (and why) when it is unusable; None
    when it names another feed than its file does."""
    try:
        request = json.loads(raw)
    except ValueError as exc:
        return {"feed_id": feed_id, "requested": 0.0, "invalid": f"it is not valid JSON ({exc})"}
    if not isinstance(request, dict):
        return {"feed_id": feed_id, "requested": 0.0, "invalid": f"it holds a {type(request).__name__}, not an object"}
    if request.get("feed_id", feed_id) != feed_id:
        return None
    requested = request.get("requested")
    if isinstance(requested, bool) or not isinstance(requested, int | float):
        return {"feed_id": feed_id, "requested": 0.0, "invalid": "it has no time of request ('requested')"}
    return {**request, "feed_id": feed_id}


def pending_feeds(storage: Storage, folder: str) -> list[dict[str, Any]]:
    """The requests in ``folder`` not yet served, oldest first, each with its ``feed_id`` (the file's name)
    (what :meth:`~airflow_tfos.shared.rundir.RunDir.pending_feeds` returns)."""
    names = [n for n in storage.listdir(folder) if is_plain_name(n)]
    done = {n[: -len(".done.json")] for n in names if n.endswith(".done.json")}
    requests = []
    for name in names:
        feed_id = name[: -len(".json")]
        if not name.endswith(".json") or name.endswith(".done.json") or feed_id in done:
            continue
        if not _FEED_ID.match(feed_id):
            log.warning("skipping the feed request %s: its name is not a feed id", name)
            continue
        path = join(folder, name)
        try:
            raw = storage.read_bytes(path)
        except FileNotFoundError:
            continue  # withdrawn meanwhile
        except OSError as exc:
            raise RunDirError.from_storage(exc, f"cannot read {path}") from exc
        request = _feed_request(feed_id, raw)
        if request is None:
            log.warning("skipping the feed request %s: it does not hold the feed id its name gives", name)
            continue
        requests.append(request)
    return sorted(requests, key=lambda r: (r["requested"], r["feed_id"]))


def stop_applies(request: dict[str, Any], application_ids: set[str] | frozenset[str], started: float) -> bool:
    """Whether a stop request is meant for an application known by ``application_ids`` that started at ``started``.

    A request naming an application applies to that application only; one that names none (written by
    hand) applies to applications started before it was written. A stop request left by an earlier
    application (a lifecycle DAG's shutdown, then a clear and rerun) never stops the next one.
    """
    target = request.get("application_id")
    if target:
        return str(target) in application_ids
    requested = request.get("requested")
    return isinstance(requested, int | float) and requested >= started
