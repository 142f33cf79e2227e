"""Pure parts of InputMode.SPARK: what to feed, checks on the schema, and balancing the workers.

Nothing here touches Spark, Arrow or TensorFlow.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from airflow_tfos.shared.errors import FeedConfigError
from airflow_tfos.shared.feed import BALANCE_MODES, Feed

#: Spark SQL scalar types a feature or label may have (``simpleString`` names).
NUMERIC_TYPES = frozenset({"tinyint", "smallint", "int", "bigint", "float", "double", "boolean"})
#: Other types fed: strings and binary (``tf.string``), dates (epoch seconds), Spark ML vectors;
#: decimals and timestamps (epoch seconds) are recognised by their prefix.
FEEDABLE_TYPES = NUMERIC_TYPES | {"string", "binary", "date", "vector"}


def check_schema(fields: Sequence[tuple[str, str]], feed: Feed, what: str = "training DataFrame") -> None:
    """Check that every fed column exists and has a type that can become a tensor.

    :param fields: ``(name, type)`` pairs, the type as Spark's ``simpleString`` (``double``,
        ``array<float>``, ``map<string,int>``, ``vector``...).
    """
    types = dict(fields)
    for column in feed.columns:
        if column not in types:
            raise FeedConfigError(
                f"column {column!r} is not in the {what} (its columns: {', '.join(types) or 'none'}); "
                "fix Feed(features=..., label=...) or select the column"
            )
        kind = types[column]
        is_array = kind.startswith("array<") and kind[6:-1] in NUMERIC_TYPES
        if (column in feed.pad or column in feed.ragged) and not is_array:
            raise FeedConfigError(
                f"column {column!r} of the {what} has type {kind}: Feed(pad=...) and Feed(ragged=...) take "
                "arrays of numbers"
            )
        if column in feed.densify and kind != "vector":
            raise FeedConfigError(f"column {column!r} of the {what} has type {kind}: Feed(densify=...) takes vectors")
        if kind in FEEDABLE_TYPES or is_array or kind.startswith(("decimal", "timestamp")):
            continue
        if kind.startswith(("map<", "struct<", "array<")):
            hint = "flatten it into numeric columns or an array<float> column"
        else:
            hint = "cast it to a numeric type or an array of a numeric type"
        raise FeedConfigError(f"column {column!r} of the {what} has type {kind}, which cannot be fed to TF: {hint}")


@dataclass(frozen=True)
class NodeShare:
    """What one node feeds per epoch after balancing.

    :param rows: rows the node holds.
    :param rows_per_epoch: rows it feeds each epoch (``steps * batch_size``).
    :param padded: rows repeated to fill the last steps (balance ``pad``).
    :param dropped: rows left out each epoch (balance ``drop``).
    """

    rows: int
    rows_per_epoch: int
    padded: int = 0
    dropped: int = 0


@dataclass(frozen=True)
class Balance:
    """The common number of synchronous steps per epoch, and each node's share."""

    steps_per_epoch: int
    shares: tuple[NodeShare, ...] = field(default_factory=tuple)
    once: bool = False

    def describe(self, labels: Sequence[str], batch_size: int) -> str:
        parts = []
        for label, share in zip(labels, self.shares, strict=True):
            text = f"{label} {share.rows} rows"
            if share.padded:
                text += f" (+{share.padded} repeated)"
            if share.dropped:
                text += f" ({share.dropped} left out)"
            parts.append(text)
        if self.once:
            return (
                f"every row once per pass, in at most {self.steps_per_epoch} steps of up to {batch_size} rows "
                "(none padded or left out): " + ", ".join(parts)
            )
        return f"{self.steps_per_epoch} steps of {batch_size} rows per epoch on every node: " + ", ".join(parts)


def balance(counts: Sequence[int], batch_size: int, mode: str = "pad", what: str = "training data") -> Balance:
    """Give every node the same number of steps per epoch (uneven partitions hang synchronous training).

    :param counts: rows held by each training node.
    :param batch_size: rows per step on each node.
    :param mode: ``pad`` (steps of the largest node; the others repeat rows) or ``drop`` (full batches of
        the smallest node; the others leave rows out).
    """
    if mode not in BALANCE_MODES:
        raise FeedConfigError(f"balance must be 'pad' or 'drop', got {mode!r}")
    total = sum(counts)
    if total == 0:
        raise FeedConfigError(f"the {what} is empty: nothing to train on (check the DataFrame's filter/path)")
    if min(counts) == 0:
        raise FeedConfigError(
            f"the {what} has {total} rows for {len(counts)} training nodes and at least one node got none: "
            "feed at least one row per node (more data, or fewer nodes)"
        )
    if mode == "pad":
        steps = max(-(-c // batch_size) for c in counts)
    else:
        steps = min(c // batch_size for c in counts)
        if steps == 0:
            raise FeedConfigError(
                f"balance='drop' leaves no full batch: the smallest node holds {min(counts)} rows, fewer than "
                f"batch_size={batch_size}; lower batch_size or use balance='pad'"
            )
    per_epoch = steps * batch_size
    shares = tuple(
        NodeShare(rows=c, rows_per_epoch=per_epoch, padded=max(per_epoch - c, 0), dropped=max(c - per_epoch, 0))
        for c in counts
    )
    return Balance(steps_per_epoch=steps, shares=shares)


def balance_once(counts: Sequence[int], batch_size: int, what: str = "validation data") -> Balance:
    """Plan a pass in which every row counts exactly once (validation data): no node repeats or leaves out a
    row; a node's last batch may be short and nodes may hold different numbers of batches.

    ``steps_per_epoch`` is the largest node's number of batches: under MultiWorkerMirroredStrategy
    tf.distribute hands a worker whose rows are used up empty batches until every worker is done, so each
    node's metrics add its own rows once and nothing else.
    """
    if sum(counts) == 0:
        raise FeedConfigError(f"the {what} is empty: nothing to evaluate on (check the DataFrame's filter/path)")
    steps = max(-(-c // batch_size) for c in counts)
    return Balance(steps_per_epoch=steps, shares=tuple(NodeShare(rows=c, rows_per_epoch=c) for c in counts), once=True)
