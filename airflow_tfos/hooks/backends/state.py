"""The state of one Spark application, as YARN reports it; the local backend maps its processes onto it.

Pure Python: shared by the hooks, the triggers (which serialize it) and the sensors.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

#: YARN's application states (ResourceManager REST API, ``app.state``).
YARN_STATES = ("NEW", "NEW_SAVING", "SUBMITTED", "ACCEPTED", "RUNNING", "FINISHED", "FAILED", "KILLED")
#: YARN's final statuses (``app.finalStatus``): UNDEFINED until the application ends.
FINAL_STATUSES = ("UNDEFINED", "SUCCEEDED", "FAILED", "KILLED")
#: The states of an application that has ended, and of one that has not (yet).
TERMINAL_STATES = frozenset({"FINISHED", "FAILED", "KILLED"})
LIVE_STATES = tuple(state for state in YARN_STATES if state not in TERMINAL_STATES)


@dataclass(frozen=True)
class AppState:
    """One application's state.

    :param app_id: the application id (``application_<ts>_<n>`` on YARN, ``local-...`` locally).
    :param state: one of :data:`YARN_STATES`.
    :param final_status: one of :data:`FINAL_STATUSES`.
    :param diagnostics: what the cluster says about it (why it failed, mostly).
    :param tracking_url: where its UI is, if anywhere.
    :param tags: its application tags (the run's tag among them).
    :param name: its name.
    :param user: the user it runs as (YARN ``app.user``; locally the OS user), when known.
    :param application_type: YARN's ``applicationType`` (``SPARK``), when known.
    """

    app_id: str
    state: str
    final_status: str = "UNDEFINED"
    diagnostics: str = ""
    tracking_url: str | None = None
    tags: tuple[str, ...] = field(default_factory=tuple)
    name: str = ""
    user: str = ""
    application_type: str = ""

    def __post_init__(self) -> None:
        if self.state not in YARN_STATES:
            raise ValueError(f"unknown application state {self.state!r}; one of {', '.join(YARN_STATES)}")
        if self.final_status not in FINAL_STATUSES:
            raise ValueError(f"unknown final status {self.final_status!r}; one of {', '.join(FINAL_STATUSES)}")

    @property
    def is_terminal(self) -> bool:
        """The application has ended (whatever its outcome)."""
        return self.state in TERMINAL_STATES

    @property
    def is_successful(self) -> bool:
        """The application has ended and says it succeeded."""
        return self.state == "FINISHED" and self.final_status == "SUCCEEDED"

    @property
    def is_running(self) -> bool:
        return not self.is_terminal

    def to_json(self) -> dict[str, Any]:
        return {
            "app_id": self.app_id,
            "state": self.state,
            "final_status": self.final_status,
            "diagnostics": self.diagnostics,
            "tracking_url": self.tracking_url,
            "tags": list(self.tags),
            "name": self.name,
            "user": self.user,
            "application_type": self.application_type,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> AppState:
        return cls(**{**data, "tags": tuple(data.get("tags") or ())})

    def __str__(self) -> str:
        outcome = f"/{self.final_status}" if self.is_terminal else ""
        return f"{self.app_id} {self.state}{outcome}"
