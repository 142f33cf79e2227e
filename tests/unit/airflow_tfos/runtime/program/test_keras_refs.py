"""A ``main_fun`` pickled in a driver whose module imported Keras 3 at its top loads in a node whose ``tf.keras`` is
Keras 2 with Keras 2's objects (and the other way round), so that ``compile`` gets one Keras."""

from __future__ import annotations

import io
import logging

from pyspark import cloudpickle

from airflow_tfos.runtime.program.keras_refs import KerasUnpickler, load_main


def keras3_main():
    """What TFoS's test_pipeline.py pickles: a function whose module's globals hold Keras 3's objects."""
    import keras
    from keras import Sequential
    from keras.layers import Dense

    namespace = {"Sequential": Sequential, "Dense": Dense, "keras": keras}
    exec(
        "def main_fun(args, ctx):\n    return Sequential, Dense, keras.optimizers.Adam\n",
        namespace,
    )
    return namespace["main_fun"]


def load(data: bytes, target: str):
    unpickler = KerasUnpickler(io.BytesIO(data), target=target)
    return unpickler.load(), unpickler.replaced


def test_keras3_objects_become_tf_keras_ones_in_a_keras2_node():
    import keras
    import tf_keras

    data = cloudpickle.dumps((keras3_main(), {"lr": 0.2}))
    (main_fun, args), replaced = load(data, "tf_keras")
    sequential, dense, adam = main_fun(args, None)
    assert (sequential, dense, adam) == (tf_keras.Sequential, tf_keras.layers.Dense, tf_keras.optimizers.Adam)
    assert args == {"lr": 0.2}
    assert ("keras.src.models.sequential.Sequential", "tf_keras.Sequential") in replaced
    # and the same bytes in a Keras 3 node: untouched
    (main_fun, _), replaced = load(data, "keras")
    assert main_fun(None, None)[:2] == (keras.Sequential, keras.layers.Dense) and replaced == []


def test_tf_keras_objects_become_keras3_ones_in_a_keras3_node():
    import keras
    import tf_keras

    namespace = {"Dense": tf_keras.layers.Dense}
    exec("def main_fun(args, ctx):\n    return Dense\n", namespace)
    (main_fun, _), replaced = load(cloudpickle.dumps((namespace["main_fun"], None)), "keras")
    assert main_fun(None, None) is keras.layers.Dense and replaced


def test_what_is_replaced_is_logged_with_how_to_keep_it(monkeypatch, caplog):
    monkeypatch.setenv("TF_USE_LEGACY_KERAS", "1")
    with caplog.at_level(logging.WARNING, "airflow_tfos.runtime.program.keras_refs"):
        load_main(io.BytesIO(cloudpickle.dumps((keras3_main(), None))))
    assert "main_fun came from the driver with keras objects, but tf.keras is tf_keras in this node" in caplog.text
    assert "keras.src.models.sequential.Sequential -> tf_keras.Sequential" in caplog.text
    assert "pass keras='keras3'" in caplog.text


def test_a_program_without_keras_objects_loads_as_pickle_does(monkeypatch, caplog):
    monkeypatch.setenv("TF_USE_LEGACY_KERAS", "1")
    with caplog.at_level(logging.WARNING):
        assert load_main(io.BytesIO(cloudpickle.dumps((len, [1, 2])))) == (len, [1, 2])
    assert caplog.text == ""
