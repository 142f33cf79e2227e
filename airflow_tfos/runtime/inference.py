"""Former path of batch inference, which earlier docs showed: import it from :mod:`airflow_tfos.runtime`
(``from airflow_tfos.runtime import predict, write_predictions``)."""

from airflow_tfos.runtime.driver.inference import predict, write_predictions

__all__ = ["predict", "write_predictions"]
