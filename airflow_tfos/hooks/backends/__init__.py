"""Where a training run's Spark driver runs: the backend strategy (:mod:`~airflow_tfos.hooks.backends.base`) and
its implementations, local (:mod:`~airflow_tfos.hooks.backends.local`, its process tracker and the process that
runs one application) and YARN (:mod:`~airflow_tfos.hooks.backends.yarn`), with what they share: the
spark-submit they run, application states, and a Spark standalone master seen through its web UI."""
