"""Airflow plugins of airflow-tfos: the api-server app that serves training reports (:mod:`.reports`).

Nothing is imported here, so that the extra links can use :mod:`.report_urls` without loading the app.
"""
