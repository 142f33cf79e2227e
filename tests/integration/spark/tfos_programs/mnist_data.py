"""MNIST-shaped synthetic data in the layouts of TFoS's ``examples/mnist/mnist_data_setup.py``.

Nothing can be downloaded here, so instead of MNIST this writes 28x28 ``uint8`` images whose label (0-9)
says which of ten 10x5 bars (two rows of five) holds bright pixels; the rest is dim noise, and each bar
is jittered by up to one pixel. A small CNN or MLP learns it in a few hundred steps. The files are what
``mnist_data_setup.py`` writes with Spark:

- ``csv/{train,test}/part-NNNNN``: one image per line, ``label,pixel0,...,pixel783`` (plus ``_SUCCESS``);
- ``tfr/{train,test}/part-r-NNNNN``: TFRecord files of ``tf.train.Example`` with ``label`` (one int64) and
  ``image`` (784 int64), as Hadoop's TFRecord output format wrote them (plus ``_SUCCESS``).

``python -m tests.integration.spark.tfos_programs.mnist_data --output DIR`` writes them; tests call :func:`write`.
"""

from __future__ import annotations

import argparse
import os

import numpy as np

#: top-left corners of the ten bars, one per label
CORNERS = [(r, c) for r in (3, 15) for c in (1, 6, 12, 17, 22)]
HEIGHT, WIDTH = 10, 5


def generate(rows: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """``rows`` images (``uint8``, shape ``(rows, 28, 28)``) and their labels (``int64``)."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 10, size=rows)
    images = rng.integers(0, 40, size=(rows, 28, 28))
    for i, label in enumerate(labels):
        r, c = CORNERS[label]
        dr, dc = rng.integers(-1, 2, size=2)
        r, c = min(max(r + dr, 0), 28 - HEIGHT), min(max(c + dc, 0), 28 - WIDTH)
        images[i, r : r + HEIGHT, c : c + WIDTH] = rng.integers(180, 256, size=(HEIGHT, WIDTH))
    return images.astype(np.uint8), labels.astype(np.int64)


def _parts(count: int, num_partitions: int) -> list[range]:
    bounds = np.linspace(0, count, num_partitions + 1).astype(int)
    return [range(bounds[i], bounds[i + 1]) for i in range(num_partitions)]


def write_csv(directory: str, images: np.ndarray, labels: np.ndarray, num_partitions: int) -> None:
    os.makedirs(directory)
    for index, part in enumerate(_parts(len(labels), num_partitions)):
        lines = [f"{labels[i]}," + ",".join(map(str, images[i].reshape(784))) for i in part]
        with open(os.path.join(directory, f"part-{index:05d}"), "w") as f:
            f.write("".join(line + "\n" for line in lines))
    open(os.path.join(directory, "_SUCCESS"), "w").close()


def write_tfrecords(directory: str, images: np.ndarray, labels: np.ndarray, num_partitions: int) -> None:
    import tensorflow as tf

    os.makedirs(directory)
    for index, part in enumerate(_parts(len(labels), num_partitions)):
        with tf.io.TFRecordWriter(os.path.join(directory, f"part-r-{index:05d}")) as writer:
            for i in part:
                feature = {
                    "label": tf.train.Feature(int64_list=tf.train.Int64List(value=[int(labels[i])])),
                    "image": tf.train.Feature(int64_list=tf.train.Int64List(value=images[i].reshape(784).tolist())),
                }
                writer.write(tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString())
    open(os.path.join(directory, "_SUCCESS"), "w").close()


def write(
    output: str, train_rows: int = 1800, test_rows: int = 600, num_partitions: int = 6, test_partitions: int = 3
) -> dict:
    """Write the four directories under ``output``; return the splits as ``{"train"|"test": (images, labels)}``.

    :param num_partitions: files per training split (``mnist_data_setup.py``: 10 for both splits).
    :param test_partitions: files per test split (one per inference node keeps inference to one round).
    """
    splits = {"train": generate(train_rows, seed=1), "test": generate(test_rows, seed=2)}
    for name, (images, labels) in splits.items():
        parts = num_partitions if name == "train" else test_partitions
        write_csv(os.path.join(output, "csv", name), images, labels, parts)
        write_tfrecords(os.path.join(output, "tfr", name), images, labels, parts)
    return splits


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--num_partitions", type=int, default=6)
    parser.add_argument("--output", default="data/mnist")
    args = parser.parse_args()
    write(args.output, num_partitions=args.num_partitions, test_partitions=args.num_partitions)
