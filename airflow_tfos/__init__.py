"""airflow-tfos."""
