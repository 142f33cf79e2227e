"""What both halves share: the run directory contract, the spec, the model registry, storage.

Pure Python: imports neither Airflow nor TensorFlow nor Spark (tests check it), ships to the Spark side
with :mod:`airflow_tfos.runtime`, and is the only code the Airflow side and the Spark side have in common.
"""
