"""Column types of the Spark feed: from Arrow as Spark sends it, to the spill, to NumPy, to tensors.

The rules (also in ``docs/feed.md``):

- numbers and booleans stay as they are; decimals become float64; dates and timestamps become float64
  seconds since 1970-01-01 UTC (a date counts from its midnight UTC, a timestamp without time zone
  counts its wall-clock time as UTC);
- strings and binary become bytes, fed as ``tf.string``;
- arrays of numbers have one length in every row (checked), or are cut or padded to the length
  ``Feed.pad`` states, or fed as ``tf.RaggedTensor`` (``Feed.ragged``);
- Spark ML vectors are spilled as Spark sends them (``type``, ``size``, ``indices``, ``values``), their
  size checked; a column whose rows are all dense feeds as a float tensor, one with sparse rows as a
  ``tf.SparseTensor`` (``Feed.densify``: as a dense tensor anyway);
- a null fails the feed, with the column named, unless ``Feed.fill`` gives the column a value.

:func:`normalize_column` runs where the rows arrive (the spill, the file readers, batch inference);
:func:`to_numpy` turns spilled batches into NumPy (:class:`Rows` for rows of varying length) and
:func:`as_tensor` / :func:`spec_of` make them tensors.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from airflow_tfos.shared.errors import FeedConfigError
from airflow_tfos.shared.feed import Feed

#: The fields of a Spark ML vector as Arrow carries it (``VectorUDT``'s SQL type).
VECTOR_FIELDS = ("type", "size", "indices", "values")
_SECONDS = {"s": 1, "ms": 10**3, "us": 10**6, "ns": 10**9}


def is_vector(kind: pa.DataType) -> bool:
    return pa.types.is_struct(kind) and [kind.field(i).name for i in range(kind.num_fields)] == list(VECTOR_FIELDS)


def _is_list(kind: pa.DataType) -> bool:
    return pa.types.is_list(kind) or pa.types.is_large_list(kind)


def normalize_column(
    name: str, column: pa.Array, widths: dict[str, int], what: str, feed: Feed | None = None, sparse: set | None = None
) -> pa.Array:
    """Check a fed column and return it as the feed keeps it (see the module's rules).

    :param widths: each fixed-width column's element count seen so far (arrays, vectors); recorded on
        first sight, and every later row must match.
    :param feed: its ``fill``, ``pad`` and ``ragged`` apply.
    :param sparse: vector columns holding a sparse row are added to it.
    """
    fill = feed.fill if feed is not None else {}
    if column.null_count and name in fill:
        column = _fill(column, fill[name])
    if column.null_count:
        raise FeedConfigError(
            f"column {name!r} of the {what} has null values ({column.null_count} in one batch): drop them in "
            f"Spark (df.dropna(subset=[{name!r}])) or give a fill value (Feed(fill={{{name!r}: 0}}))"
        )
    kind = column.type
    if pa.types.is_decimal(kind):
        return pc.cast(column, pa.float64())
    if pa.types.is_date32(kind):
        return pc.multiply(pc.cast(pc.cast(column, pa.int32()), pa.float64()), 86400.0)
    if pa.types.is_date64(kind):
        return pc.divide(pc.cast(pc.cast(column, pa.int64()), pa.float64()), 1000.0)
    if pa.types.is_timestamp(kind):
        return pc.divide(pc.cast(pc.cast(column, pa.int64()), pa.float64()), float(_SECONDS[kind.unit]))
    if pa.types.is_string(kind) or pa.types.is_large_string(kind):
        return column.cast(pa.large_binary() if pa.types.is_large_string(kind) else pa.binary())
    if pa.types.is_binary(kind) or pa.types.is_large_binary(kind):
        return column
    if is_vector(kind):
        _check_vectors(name, column, widths, what, sparse)
        return column
    if _is_list(kind) and _is_number(kind.value_type):
        return _check_array(name, column, widths, what, feed)
    if _is_number(kind):
        return column
    raise FeedConfigError(
        f"column {name!r} of the {what} has type {kind}, which cannot be fed to TF: make it a number, a string, "
        "a vector or an array of numbers"
    )


def _is_number(kind: pa.DataType) -> bool:
    return pa.types.is_integer(kind) or pa.types.is_floating(kind) or pa.types.is_boolean(kind)


def _fill(column: pa.Array, value: Any) -> pa.Array:
    if is_vector(column.type) and isinstance(value, (list, tuple)):
        value = {"type": 1, "size": None, "indices": None, "values": [float(v) for v in value]}
    return pc.fill_null(column, pa.scalar(value, type=column.type))


def _check_array(name: str, column: pa.Array, widths: dict[str, int], what: str, feed: Feed | None) -> pa.Array:
    if not len(column):
        return column
    if column.flatten().null_count:
        raise FeedConfigError(f"array column {name!r} of the {what} has null elements: fill them in Spark first")
    lengths = pc.list_value_length(column).to_numpy()
    if feed is not None and name in feed.ragged:
        return column
    if feed is not None and name in feed.pad:
        length, value = feed.pad[name]
        widths[name] = length
        return pad_rows(column, lengths, length, value)
    spread = _width_spread(name, lengths, widths)
    if spread:
        raise FeedConfigError(
            f"array column {name!r} of the {what} has rows of different lengths ({spread[0]} to {spread[1]}): "
            f"every row must have the same number of elements; feed it with Feed(ragged=[{name!r}]), or cut "
            f"and pad it with Feed(pad={{{name!r}: [length, value]}})"
        )
    return column


def _width_spread(name: str, sizes: np.ndarray, widths: dict[str, int]) -> tuple[int, int] | None:
    """None when every row has the column's width (the first one seen sets it), else the smallest and
    largest sizes seen."""
    low, high = int(sizes.min()), int(sizes.max())
    width = widths.setdefault(name, low)
    return None if low == high == width else (min(low, width), max(high, width))


def pad_rows(column: pa.Array, lengths: np.ndarray, length: int, value: Any) -> pa.Array:
    """Cut each row of a list column to ``length`` elements, or pad it with ``value`` up to it."""
    flat = column.flatten().to_numpy(zero_copy_only=False)
    splits = np.concatenate([[0], np.cumsum(lengths)])
    rows = np.repeat(np.arange(len(lengths)), lengths)
    position = np.arange(len(flat)) - splits[rows]
    keep = position < length
    out = np.full((len(lengths), length), value, dtype=flat.dtype)
    out[rows[keep], position[keep]] = flat[keep]
    offsets = pa.array(np.arange(0, out.size + 1, length, dtype=np.int32))
    return pa.ListArray.from_arrays(offsets, pa.array(out.reshape(-1), type=column.type.value_type))


def _check_vectors(name: str, column: pa.Array, widths: dict[str, int], what: str, sparse: set | None) -> None:
    kinds, sizes, _, values = column.flatten()
    sparse_rows = pc.equal(kinds, 0)
    size = pc.if_else(sparse_rows, sizes, pc.list_value_length(values)).to_numpy(zero_copy_only=False)
    if not len(size):
        return
    spread = _width_spread(name, size, widths)
    if spread:
        raise FeedConfigError(
            f"vector column {name!r} of the {what} has vectors of different sizes ({spread[0]} to {spread[1]}): "
            "every row must have the same size; build the column with one size (e.g. one VectorAssembler over "
            "the same input columns) for every row"
        )
    if sparse is not None and pc.any(sparse_rows).as_py():
        sparse.add(name)


@dataclass(frozen=True)
class Rows:
    """Rows of varying length, flat: row ``i`` holds ``values[splits[i]:splits[i + 1]]``. With ``indices``,
    a sparse vector of ``width`` elements: row ``i``'s values sit at those positions, in order.

    Slices, index arrays and :func:`concat` work on it as on NumPy arrays of rows, without a loop per row.
    """

    values: np.ndarray
    splits: np.ndarray
    indices: np.ndarray | None = None
    width: int | None = None

    def __len__(self) -> int:
        return len(self.splits) - 1

    @property
    def dtype(self) -> np.dtype:
        return self.values.dtype

    def astype(self, dtype, copy: bool = False) -> Rows:
        return replace(self, values=self.values.astype(dtype, copy=copy))

    def __getitem__(self, key) -> Rows:
        if isinstance(key, slice):
            start, stop, _ = key.indices(len(self))
            stop = max(start, stop)
            low, high = self.splits[start], self.splits[stop]
            take = slice(low, high)
            splits = self.splits[start : stop + 1] - low
        else:
            order = np.asarray(key, dtype=np.int64)
            lengths = np.diff(self.splits)[order]
            splits = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
            take = np.repeat(self.splits[:-1][order] - splits[:-1], lengths) + np.arange(splits[-1])
        indices = None if self.indices is None else self.indices[take]
        return Rows(self.values[take], splits, indices, self.width)


def concat(parts: Sequence) -> Any:
    """Join chunks of one column, NumPy arrays or :class:`Rows`, row after row."""
    if not isinstance(parts[0], Rows):
        return np.concatenate(parts)
    offsets = np.cumsum([0] + [p.splits[-1] for p in parts[:-1]])
    splits = np.concatenate([[0]] + [p.splits[1:] + o for p, o in zip(parts, offsets, strict=True)])
    indices = None if parts[0].indices is None else np.concatenate([p.indices for p in parts])
    return Rows(np.concatenate([p.values for p in parts]), splits, indices, parts[0].width)


def to_numpy(batch: pa.RecordBatch, columns: Sequence[str], widths: dict[str, int], sparse=frozenset()) -> dict:
    """Turn the named columns of ``batch`` as the feed keeps them into NumPy: ``(rows,)`` or ``(rows, width)``
    arrays (bytes as objects), or :class:`Rows` for ragged arrays and the vector columns in ``sparse``."""
    arrays = {}
    for name in columns:
        column = batch.column(name)
        if is_vector(column.type):
            arrays[name] = _vectors(column, widths[name], name in sparse)
        elif _is_list(column.type):
            flat = column.flatten().to_numpy(zero_copy_only=False)
            if name in widths:
                arrays[name] = flat.reshape(len(column), widths[name])
            else:
                lengths = pc.list_value_length(column).to_numpy(zero_copy_only=False)
                arrays[name] = Rows(flat, np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64))
        else:
            arrays[name] = column.to_numpy(zero_copy_only=False)
    return arrays


def _vectors(column: pa.Array, size: int, as_sparse: bool):
    kinds, _, indices, values = column.flatten()
    lengths = pc.list_value_length(values).to_numpy(zero_copy_only=False).astype(np.int64)
    flat = values.flatten().to_numpy(zero_copy_only=False)
    dense_rows = kinds.to_numpy(zero_copy_only=False) == 1
    if not as_sparse and dense_rows.all():
        return flat.reshape(len(column), size)
    splits = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    rows = np.repeat(np.arange(len(column)), lengths)
    positions = np.arange(len(flat)) - splits[rows]
    positions[~dense_rows[rows]] = indices.flatten().to_numpy(zero_copy_only=False)
    if as_sparse:
        return Rows(flat, splits, positions.astype(np.int64), size)
    dense = np.zeros((len(column), size), dtype=flat.dtype)
    dense[rows, positions] = flat
    return dense


def element_type(kind: pa.DataType) -> np.dtype:
    """The NumPy type of a column's elements (of its arrays or vectors; bytes are objects)."""
    if is_vector(kind):
        return np.dtype(np.float64)
    if _is_list(kind):
        kind = kind.value_type
    if pa.types.is_binary(kind) or pa.types.is_large_binary(kind):
        return np.dtype(object)
    return np.dtype(kind.to_pandas_dtype())


def as_tensor(value):
    """A tensor of a batch's column: :class:`Rows` become ``tf.SparseTensor`` or ``tf.RaggedTensor``."""
    if not isinstance(value, Rows):
        return value
    import tensorflow as tf

    if value.indices is None:
        return tf.RaggedTensor.from_row_splits(value.values, value.splits.astype(np.int64), validate=False)
    rows = np.repeat(np.arange(len(value), dtype=np.int64), np.diff(value.splits))
    return tf.SparseTensor(np.stack([rows, value.indices], axis=1), value.values, [len(value), value.width])


def spec_of(value):
    """The ``tf.TypeSpec`` of a batch's column, with the batch dimension left open."""
    import tensorflow as tf

    if isinstance(value, Rows):
        if value.indices is None:
            return tf.RaggedTensorSpec([None, None], tf.as_dtype(value.dtype), 1, tf.int64)
        return tf.SparseTensorSpec([None, value.width], tf.as_dtype(value.dtype))
    dtype = tf.string if value.dtype == object else tf.as_dtype(value.dtype)
    return tf.TensorSpec(shape=(None, *value.shape[1:]), dtype=dtype)
