"""TensorFlowOnSpark's ``dfutil`` module: Spark DataFrames to and from TFRecord files of ``tf.train.Example``.

TFoS went through Hadoop's TFRecord InputFormat/OutputFormat JARs; here each partition writes (and each
file is read back) in Python with TensorFlow's own TFRecord writer and reader, on local paths and on the
URIs of :mod:`airflow_tfos.shared.storage` (``hdfs://`` and ``webhdfs://`` over WebHDFS). The layout is
Hadoop's: one ``part-r-NNNNN`` file per partition and an empty ``_SUCCESS`` when all are written.

Types, as in TFoS: ``float``/``double`` become a FloatList, the integer types and ``boolean`` an Int64List,
``string`` and ``binary`` a BytesList, and arrays of those numbers the list of their kind. Reading infers
the schema from the first record: an Int64List is ``long``, a FloatList ``double``, a BytesList ``string``
(``binary`` for the features named in ``binary_features``), and a list of more than one value an array of
that type. Differences from TFoS: booleans are written as 0/1 (current protobuf refused them in TFoS); a
null value is refused with the column's name (TFoS failed inside protobuf); an empty feature reads as None
(TFoS failed) in a column of its kind (TFoS: string); an existing output directory is refused before
anything is written (as Hadoop's output format did).

TensorFlow is imported in the Spark Python workers that write or read (once per worker, some seconds), as
TFoS did.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import weakref
from collections.abc import Callable, Iterable, Iterator, Sequence

from airflow_tfos.shared.storage import join, storage_for

#: DataFrames made by :func:`loadTFRecords`, to the directory they were read from (TFoS's ``loadedDF``)
loadedDF: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

_FLOAT = ("float", "double")
_INT64 = ("boolean", "tinyint", "smallint", "int", "bigint", "long")
_BYTES = ("binary", "string")
_KINDS = {
    **dict.fromkeys(_FLOAT, "float"),
    **dict.fromkeys(_INT64, "int64"),
    **dict.fromkeys(_BYTES, "bytes"),
    **{f"array<{t}>": "float_list" for t in _FLOAT},
    **{f"array<{t}>": "int64_list" for t in _INT64},
}
SUCCESS = "_SUCCESS"


def isLoadedDF(df) -> bool:
    """Whether ``df`` was made by :func:`loadTFRecords` (Spark ML pipelines read it from its TFRecords)."""
    return df in loadedDF


def _feature_kinds(dtypes: Sequence[tuple[str, str]]) -> list[tuple[str, str, str]]:
    """``(column, dtype, kind)`` for each column, or raise naming the columns whose type has no Feature."""
    bad = [f"{name} ({dtype})" for name, dtype in dtypes if dtype not in _KINDS]
    if bad:
        raise TypeError(
            f"cannot write {', '.join(bad)} as tf.train.Example features: supported are "
            f"{', '.join(sorted(_KINDS))}; cast or drop those columns first"
        )
    return [(name, dtype, _KINDS[dtype]) for name, dtype in dtypes]


def toTFExample(dtypes: Sequence[tuple[str, str]]) -> Callable[[Iterable], list[tuple[bytearray, None]]]:
    """A ``mapPartitions`` function turning rows of a DataFrame with ``dtypes`` into serialized Examples.

    Each output is ``(bytearray, None)``, as TFoS's was (the key/value pair of Hadoop's output format).
    """
    kinds = _feature_kinds(dtypes)

    def to_examples(rows: Iterable) -> list[tuple[bytearray, None]]:
        return [(bytearray(_example(row, kinds).SerializeToString()), None) for row in rows]

    return to_examples


def _example(row, kinds: Sequence[tuple[str, str, str]]):
    import tensorflow as tf

    features = {}
    for name, dtype, kind in kinds:
        value = row[name]
        if value is None:
            raise ValueError(
                f"column {name!r} is null in a row: tf.train.Example has no null; fill or drop the nulls "
                "(df.na.fill / df.na.drop) before saveAsTFRecords"
            )
        if kind == "float":
            feature = tf.train.Feature(float_list=tf.train.FloatList(value=[value]))
        elif kind == "int64":
            feature = tf.train.Feature(int64_list=tf.train.Int64List(value=[int(value)]))  # protobuf refuses bools
        elif kind == "bytes":
            data = bytes(value) if dtype == "binary" else str(value).encode("utf-8")
            feature = tf.train.Feature(bytes_list=tf.train.BytesList(value=[data]))
        elif kind == "float_list":
            feature = tf.train.Feature(float_list=tf.train.FloatList(value=value))
        else:
            feature = tf.train.Feature(int64_list=tf.train.Int64List(value=[int(v) for v in value]))
        features[name] = feature
    return tf.train.Example(features=tf.train.Features(feature=features))


def infer_schema(example, binary_features: Sequence[str] = ()):
    """The Spark schema of rows read from ``example`` (a ``tf.train.Example``), columns sorted by name.

    :param binary_features: features to read as ``binary``; other BytesLists read as ``string``.
    """
    from pyspark.sql.types import ArrayType, BinaryType, DoubleType, LongType, StringType, StructField, StructType

    def sql_type(name: str, feature):
        if name in binary_features:
            return BinaryType()
        kind = feature.WhichOneof("kind")
        values = getattr(feature, kind).value if kind else []
        base = {"int64_list": LongType(), "float_list": DoubleType()}.get(kind, StringType())
        return ArrayType(base) if len(values) > 1 else base

    items = sorted(example.features.feature.items())
    return StructType([StructField(name, sql_type(name, feature), True) for name, feature in items])


def fromTFExample(records: Iterable, binary_features: Sequence[str] = ()) -> list:
    """A ``mapPartitions`` function turning serialized Examples into Rows (columns sorted by name).

    :param records: serialized ``tf.train.Example`` s, or ``(serialized, None)`` pairs as TFoS had them.
    :param binary_features: features to return as ``bytearray``; other BytesLists are decoded as UTF-8.
    """
    import tensorflow as tf
    from pyspark.sql import Row

    def value(name: str, feature):
        kind = feature.WhichOneof("kind")
        values = list(getattr(feature, kind).value) if kind else []
        if not values:
            return None
        if kind == "bytes_list" and name in binary_features:
            return bytearray(values[0])  # a binary column holds one value (TFoS's rule)
        if kind == "bytes_list":
            values = [v.decode("utf-8") for v in values]
        return values if len(values) > 1 else values[0]

    rows = []
    for record in records:
        example = tf.train.Example()
        example.ParseFromString(bytes(record[0] if isinstance(record, tuple) else record))
        rows.append(Row(**{name: value(name, f) for name, f in sorted(example.features.feature.items())}))
    return rows


def saveAsTFRecords(df, output_dir: str) -> None:
    """Write ``df`` as TFRecord files of ``tf.train.Example`` (one per partition) into a new ``output_dir``.

    :param df: the DataFrame; its column types must be among those the module docstring lists.
    :param output_dir: a local path, ``file://``, ``hdfs://`` or ``webhdfs://`` URI that does not exist yet.
    """
    to_examples = toTFExample(df.dtypes)  # checks the types here, before any task starts
    storage = storage_for(output_dir)
    if storage.exists(output_dir):
        raise FileExistsError(f"output directory {output_dir} already exists: delete it or write to a new directory")
    storage.makedirs(output_dir)
    df.rdd.mapPartitionsWithIndex(lambda index, rows: _write_part(output_dir, index, to_examples(rows))).collect()
    storage.write_bytes(join(output_dir, SUCCESS), b"")


def _write_part(output_dir: str, index: int, examples: list[tuple[bytearray, None]]) -> Iterator[int]:
    import tensorflow as tf

    target = join(output_dir, f"part-r-{index:05d}")
    local_dir = tempfile.mkdtemp(prefix="airflow-tfos-tfrecords-")
    try:
        local = os.path.join(local_dir, "part")
        with tf.io.TFRecordWriter(local) as writer:
            for data, _ in examples:
                writer.write(bytes(data))
        with open(local, "rb") as source, storage_for(target).open(target, "wb") as out:
            shutil.copyfileobj(source, out, 1 << 20)
    finally:
        shutil.rmtree(local_dir, ignore_errors=True)
    yield len(examples)


def loadTFRecords(sc, input_dir: str, binary_features: Sequence[str] = ()):
    """Read the TFRecord files of ``tf.train.Example`` in ``input_dir`` as a DataFrame, one partition per file.

    :param sc: the SparkContext.
    :param input_dir: a directory (its files not starting with ``_`` or ``.``), a file or a glob: a local
        path, ``file://``, ``hdfs://`` or ``webhdfs://``.
    :param binary_features: features to read as ``binary`` (TensorFlow stores strings and bytes alike).
    """
    import tensorflow as tf
    from pyspark.sql import SparkSession

    from airflow_tfos.runtime.feed.files import list_files

    binary = list(binary_features)
    paths = [f.path for f in list_files(input_dir)]
    records = sc.parallelize(paths, len(paths)).mapPartitions(_read_records)
    first = records.take(1)
    if not first:
        raise ValueError(f"the TFRecord files in {input_dir} hold no records: nothing to infer a schema from")
    example = tf.train.Example()
    example.ParseFromString(first[0])
    schema = infer_schema(example, binary)
    rows = records.mapPartitions(lambda part: fromTFExample(part, binary))
    df = SparkSession.builder.getOrCreate().createDataFrame(rows, schema)
    loadedDF[df] = input_dir
    return df


def _read_records(paths: Iterable[str]) -> Iterator[bytes]:
    from airflow_tfos.runtime.feed.files import tfrecord_dataset

    for path in paths:
        yield from tfrecord_dataset([path]).as_numpy_iterator()
