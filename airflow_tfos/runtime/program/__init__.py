"""What runs in a TF node's own process, beside the user's ``main_fun``: its entry point
(:mod:`~airflow_tfos.runtime.program.child`), the context ``main_fun`` gets, checkpoints and exports, progress
reports, and SavedModels on remote storage. Never imports :mod:`airflow_tfos.runtime.driver`."""
