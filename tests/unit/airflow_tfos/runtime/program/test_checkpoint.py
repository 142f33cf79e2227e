"""fit_resumable's epochs over a dataset whose length tf.data cannot know (files read as they come)."""

from __future__ import annotations

import numpy as np
import pytest

from airflow_tfos.runtime.program.checkpoint import one_pass_per_epoch


def passes(batches: int):
    """A dataset of ``batches`` batches per pass whose length tf.data cannot know (as parquet_dataset's)."""
    import tensorflow as tf

    def rows():
        for _ in range(batches):
            yield np.ones((4, 2), "float32"), np.ones((4, 1), "float32")

    spec = (tf.TensorSpec((None, 2), tf.float32), tf.TensorSpec((None, 1), tf.float32))
    return tf.data.Dataset.from_generator(rows, output_signature=spec)


def steps_trained(dataset, *, epochs: int, steps_per_epoch: int) -> int:
    import tensorflow as tf

    model = tf.keras.Sequential([tf.keras.Input(shape=(2,)), tf.keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
    model.fit(dataset, epochs=epochs, steps_per_epoch=steps_per_epoch, verbose=0)
    return int(model.optimizer.iterations.numpy())


def test_every_epoch_is_one_full_pass_of_a_dataset_of_unknown_length():
    assert steps_trained(passes(5), epochs=3, steps_per_epoch=5) < 15  # Keras alone: out of data in epoch 2
    assert steps_trained(one_pass_per_epoch(passes(5), 5), epochs=3, steps_per_epoch=5) == 15


def test_a_pass_of_another_length_fails_naming_both_numbers():
    import tensorflow as tf

    with pytest.raises(tf.errors.FailedPreconditionError, match="expected to contain 6 element"):
        steps_trained(one_pass_per_epoch(passes(5), 6), epochs=2, steps_per_epoch=6)
