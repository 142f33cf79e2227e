"""Pure parts of InputMode.SPARK: what to feed, checks on the schema, and balancing the workers.

Nothing here touches Spark, Arrow or TensorFlow.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from airflow_tfos.runtime.errors import FeedConfigError

#: Spark SQL scalar types a feature or label may have (``simpleString`` names).
NUMERIC_TYPES = frozenset({"tinyint", "smallint", "int", "bigint", "float", "double", "boolean"})
#: Other types fed: strings and binary (``tf.string``), dates (epoch seconds), Spark ML vectors;
#: decimals and timestamps (epoch seconds) are recognised by their prefix.
FEEDABLE_TYPES = NUMERIC_TYPES | {"string", "binary", "date", "vector"}
BALANCE_MODES = ("pad", "drop")
#: How the nodes get the rows of a DataFrame: ``auto`` (read its Parquet files directly when it is a plain
#: scan of them, else through Spark), ``direct`` (fail unless it is) or ``spark`` (always through Spark).
READ_MODES = ("auto", "direct", "spark")


def _is_float_type(name: Any) -> bool:
    """Whether ``name`` names a floating-point NumPy type."""
    try:
        return np.dtype(name).kind == "f"
    except TypeError:
        return False


@dataclass(frozen=True)
class Feed:
    """How a DataFrame's rows become the batches each node trains on.

    Column types and the tensors they become are listed in ``docs/feed.md``.

    :param features: the feature columns, by name. One column gives the model a tensor; several give
        it a dict of tensors keyed by column name.
    :param label: the label column, or several (a dict of labels keyed by column name, for a model with
        several outputs named like them), or None for unlabelled data.
    :param batch_size: rows per batch on each node (the per-worker batch).
    :param shuffle: shuffle rows within a window, and the order of windows, anew every epoch.
    :param shuffle_window: rows shuffled together when ``shuffle`` is on.
    :param balance: ``"pad"`` (a node short of the common number of steps repeats some of its own rows,
        so no row is left out) or ``"drop"`` (every node stops at the smallest node's full batches).
    :param seed: seeds the shuffle.
    :param cast_floats: NumPy dtype floating-point features are cast to (None: keep Spark's).
    :param weight: a column of per-row sample weights: batches become ``(features, label, weight)``.
    :param fill: column name to the value its nulls become (by default a null fails the feed).
    :param pad: array column name to ``[length, value]``: rows are cut or padded (with ``value``) to ``length``.
    :param ragged: array columns whose rows may differ in length, fed as ``tf.RaggedTensor``.
    :param densify: vector columns fed as dense tensors even when some rows are sparse vectors.
    :param read: ``"auto"``: when the DataFrame is a plain scan of Parquet files (``spark.read.parquet``,
        at most a select of columns), each node reads its share of the files' row groups itself, skipping
        Spark's transfer of the rows to Python; else through Spark. ``"direct"``: read the files, and fail
        if the DataFrame is not such a scan. ``"spark"``: always through Spark.
    """

    features: tuple[str, ...]
    label: str | tuple[str, ...] | None = None
    batch_size: int = 64
    shuffle: bool = True
    shuffle_window: int = 10_000
    balance: str = "pad"
    seed: int = 0
    cast_floats: str | None = "float32"
    weight: str | None = None
    fill: dict[str, Any] = field(default_factory=dict, hash=False)
    pad: dict[str, Any] = field(default_factory=dict, hash=False)
    ragged: tuple[str, ...] = ()
    densify: tuple[str, ...] = ()
    read: str = "auto"

    def __post_init__(self):
        features = _names(self.features)
        object.__setattr__(self, "features", features)
        if self.label is not None and not isinstance(self.label, str):
            object.__setattr__(self, "label", _names(self.label))
        for name in ("ragged", "densify"):
            object.__setattr__(self, name, _names(getattr(self, name)))
        object.__setattr__(self, "fill", dict(self.fill or {}))
        object.__setattr__(self, "pad", dict(self.pad or {}))
        if not features:
            raise FeedConfigError("Feed(features=...) must name at least one column")
        for label in self.labels:
            if label in features:
                raise FeedConfigError(f"column {label!r} is both a feature and the label")
        if self.weight is not None and self.weight in features + self.labels:
            raise FeedConfigError(f"column {self.weight!r} is the weight and also a feature or label")
        if self.weight is not None and not self.labels:
            raise FeedConfigError("Feed(weight=...) needs a label: sample weights weigh each row's loss")
        if not isinstance(self.batch_size, int) or self.batch_size < 1:
            raise FeedConfigError(f"Feed.batch_size must be a positive integer, got {self.batch_size!r}")
        if self.balance not in BALANCE_MODES:
            raise FeedConfigError(f"Feed.balance must be 'pad' or 'drop', got {self.balance!r}")
        if self.read not in READ_MODES:
            raise FeedConfigError(f"Feed.read must be 'auto', 'direct' or 'spark', got {self.read!r}")
        if self.shuffle_window < 1:
            raise FeedConfigError(f"Feed.shuffle_window must be positive, got {self.shuffle_window}")
        if self.cast_floats is not None and not _is_float_type(self.cast_floats):
            raise FeedConfigError(
                f"Feed.cast_floats must name a floating-point NumPy type ('float32', 'float64', 'float16') "
                f"or be None, got {self.cast_floats!r}"
            )
        self._check_options()

    def _check_options(self) -> None:
        for option, names in (
            ("fill", self.fill),
            ("pad", self.pad),
            ("ragged", self.ragged),
            ("densify", self.densify),
        ):
            unknown = [n for n in names if n not in self.columns]
            if unknown:
                raise FeedConfigError(f"Feed({option}=...) names {unknown}, which are not fed columns")
        for name in set(self.pad) & set(self.ragged):
            raise FeedConfigError(f"column {name!r} is in both Feed(pad=...) and Feed(ragged=...): choose one")
        for name, rule in self.pad.items():
            if not (isinstance(rule, (list, tuple)) and len(rule) == 2 and isinstance(rule[0], int) and rule[0] > 0):
                raise FeedConfigError(f"Feed(pad={{{name!r}: ...}}) must be [length, value] with a positive length")

    @property
    def labels(self) -> tuple[str, ...]:
        """The label columns (none, one or several)."""
        if self.label is None:
            return ()
        return (self.label,) if isinstance(self.label, str) else self.label

    @property
    def columns(self) -> tuple[str, ...]:
        return self.features + self.labels + ((self.weight,) if self.weight else ())

    def arrange(self, values: Mapping[str, Any]):
        """Lay one batch of column values out as the model takes it: the features (one, or a dict of
        several), then the label (one, or a dict of several), then the sample weights."""
        x = values[self.features[0]] if len(self.features) == 1 else {n: values[n] for n in self.features}
        if not self.labels:
            return x
        y = values[self.label] if isinstance(self.label, str) else {n: values[n] for n in self.labels}
        return (x, y, values[self.weight]) if self.weight else (x, y)


def _names(value) -> tuple[str, ...]:
    return (value,) if isinstance(value, str) else tuple(value or ())


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
