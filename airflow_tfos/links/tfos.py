"""Extra links on TFoS tasks: the application's UI, TensorBoard, the training report."""

from __future__ import annotations

from typing import TYPE_CHECKING

from airflow.sdk import BaseOperatorLink
from airflow.sdk.execution_time.xcom import XCom

if TYPE_CHECKING:
    from airflow.sdk import BaseOperator
    from airflow.sdk.types import TaskInstanceKey

#: XCom keys the operators push the links' targets under.
TRACKING_URL_KEY = "tracking_url"
TENSORBOARD_URL_KEY = "tensorboard_url"
REPORT_URL_KEY = "report_url"


class _XComLink(BaseOperatorLink):
    key = ""

    def get_link(self, operator: BaseOperator, *, ti_key: TaskInstanceKey) -> str:
        value = XCom.get_value(ti_key=ti_key, key=self.key)
        return str(value) if value else ""


class SparkApplicationLink(_XComLink):
    """The application's UI (YARN's tracking URL, or the local Spark UI)."""

    name = "Spark application"
    key = TRACKING_URL_KEY


class TensorBoardLink(_XComLink):
    """TensorBoard beside the chief, while the run is live."""

    name = "TensorBoard"
    key = TENSORBOARD_URL_KEY


class TrainingReportLink(_XComLink):
    """The run's training report (report.html in the run directory)."""

    name = "Training report"
    key = REPORT_URL_KEY
