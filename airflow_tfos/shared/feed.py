"""The feed's settings (:class:`Feed`): how a DataFrame's rows become the batches each node trains on.

Pure Python, part of the spec: spec.json's ``feed`` is a :class:`Feed`'s fields, and :func:`~airflow_tfos.shared.spec.
check_feed` checks it by building one, so the feed's rules are written once, here (the runtime's feed reads
them from the same object).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from airflow_tfos.shared.errors import FeedConfigError

#: How a feed evens out its nodes' steps (:attr:`Feed.balance`).
BALANCE_MODES = ("pad", "drop")
#: How the nodes get the rows of a DataFrame: ``auto`` (read its Parquet files directly when it is a plain
#: scan of them, else through Spark), ``direct`` (fail unless it is) or ``spark`` (always through Spark).
READ_MODES = ("auto", "direct", "spark")
#: The floating-point types fed floats may be cast to (:attr:`Feed.cast_floats`), and the other names NumPy gives
#: them (``"float"`` is NumPy's float64).
FLOAT_TYPES = ("float16", "float32", "float64")
FLOAT_ALIASES = frozenset({"half", "single", "double", "float", "f2", "f4", "f8"})


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
            modes = ", ".join(map(repr, BALANCE_MODES))
            raise FeedConfigError(f"Feed.balance must be one of {modes}, got {self.balance!r}")
        if self.read not in READ_MODES:
            raise FeedConfigError(f"Feed.read must be one of {', '.join(map(repr, READ_MODES))}, got {self.read!r}")
        if self.shuffle_window < 1:
            raise FeedConfigError(f"Feed.shuffle_window must be positive, got {self.shuffle_window}")
        if self.cast_floats is not None and self.cast_floats not in (*FLOAT_TYPES, *FLOAT_ALIASES):
            raise FeedConfigError(
                f"Feed.cast_floats must name a floating-point type ({', '.join(map(repr, FLOAT_TYPES))}) or be "
                f"None, got {self.cast_floats!r}"
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
