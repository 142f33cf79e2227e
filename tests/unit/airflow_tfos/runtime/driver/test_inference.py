"""Batch inference's shaping of flat feature rows into the model input's shape."""

from __future__ import annotations

import numpy as np
import pytest

from airflow_tfos.shared.errors import FeedConfigError


def test_flat_rows_take_the_model_inputs_shape_and_a_count_that_does_not_fit_is_named():
    import tensorflow as tf

    from airflow_tfos.runtime.driver.inference import _fit_shape

    spec = tf.TensorSpec(shape=(None, 28, 28, 1), dtype=tf.float32)
    flat = np.arange(2 * 784).reshape(2, 784)
    shaped = _fit_shape(flat, spec, "conv2d_input")
    assert shaped.shape == (2, 28, 28, 1) and shaped[1, 27, 27, 0] == flat[1, 783]
    assert _fit_shape(np.zeros(3), tf.TensorSpec(shape=(None, 1)), "x").shape == (3, 1)
    with pytest.raises(
        FeedConfigError,
        match=r"conv2d_input. takes rows of shape \(28, 28, 1\) \(784 values\), but the feature columns give 100",
    ):
        _fit_shape(np.zeros((2, 100)), spec, "conv2d_input")
