"""TensorFlowOnSpark's ``compat`` module: small TensorFlow helpers for ``map_fun``."""

from __future__ import annotations

import os
import tempfile


def export_saved_model(model, export_dir: str, is_chief: bool = False) -> None:
    """Save ``model`` as a SavedModel to ``export_dir`` on the chief, elsewhere on other workers.

    Every worker of a MultiWorkerMirroredStrategy must take part in saving; only the chief's copy is
    kept, the others go to a temporary directory.
    """
    target = export_dir if is_chief else tempfile.mkdtemp(prefix="airflow-tfos-worker-model-")
    if hasattr(model, "export") and os.environ.get("TF_USE_LEGACY_KERAS") != "1":
        model.export(target)  # Keras 3: SavedModel for serving
    else:
        model.save(target, save_format="tf")


def disable_auto_shard(options) -> None:
    """Turn off tf.data's auto-sharding on ``options`` (each node already reads its own shard)."""
    import tensorflow as tf

    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF


def is_gpu_available() -> bool:
    """Whether TensorFlow sees a GPU in this node."""
    import tensorflow as tf

    return len(tf.config.list_physical_devices("GPU")) > 0
