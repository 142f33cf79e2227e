"""The metric gate of the model registry: whether a candidate model goes into service, and what was judged.

:func:`decide` compares a candidate's metric with the model in service (its score on the same evaluation
data when the candidate's metrics record it, else the score recorded when it was published) and refuses a
version older than the one in service; :func:`judged_by` and :func:`copy_score` read back what a decision
judged, so that the copy in service can be checked against it. Pure functions of records: apart from
:mod:`airflow_tfos.shared.registry`, whose :class:`~airflow_tfos.shared.registry.ModelRegistry` records the
decisions and puts the copies in service, so that the rule a publish goes by reads in one place.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from airflow_tfos.shared.errors import RegistryError


@dataclass(frozen=True)
class Decision:
    """Whether a candidate model goes into service, and why."""

    publish: bool
    reason: str
    candidate: float | None
    baseline: float | None


def decide(
    metrics: dict[str, Any],
    current: dict[str, Any] | None,
    *,
    metric: str,
    higher_is_better: bool = True,
    tolerance: float = 0.0,
    version: str,
) -> Decision:
    """Decide whether a candidate with ``metrics`` replaces the ``current`` record.

    The candidate is compared with ``baseline_<metric>`` from its own metrics when present: the model
    in service scored on the same evaluation data as the candidate, which is the fair comparison
    (the training example records it before warm-starting from that model). Otherwise with the
    ``score`` recorded when the current version was published. "Not worse" means within
    ``tolerance`` of the baseline. A version older than the one in service never replaces it.
    """
    if metric not in metrics:
        raise RegistryError(
            f"the candidate's metrics have no {metric!r} (they have: {', '.join(sorted(metrics)) or 'none'}): "
            "return it from train_fn's export_model(metrics=...) or set metric= to one of them"
        )
    candidate = float(metrics[metric])
    if current is None:
        return Decision(True, "no model is in service yet", candidate, None)
    if str(version) < str(current.get("version", "")):
        return Decision(
            False, f"version {version} is older than version {current['version']} in service", candidate, None
        )
    if metrics.get(f"baseline_{metric}") is not None:
        baseline, source = float(metrics[f"baseline_{metric}"]), "the model in service on the same evaluation data"
    elif current.get("score") is not None:
        baseline, source = float(current["score"]), f"version {current.get('version')} when it was published"
    else:
        return Decision(True, "the model in service has no recorded score", candidate, None)
    ok = candidate >= baseline - tolerance if higher_is_better else candidate <= baseline + tolerance
    verdict = "not worse than" if ok else "worse than"
    return Decision(ok, f"{metric} {candidate:.4f} is {verdict} {baseline:.4f} ({source})", candidate, baseline)


def judged_by(decision: dict[str, Any]) -> dict[str, Any]:
    """What a decision record judged: the metric, the candidate's score and the baseline."""
    return {k: decision.get(k) for k in ("metric", "candidate", "baseline")}


def copy_score(copy: dict[str, Any], metric: str | None) -> float | None:
    """A copy's score for ``metric`` (its recorded ``score`` when its metrics do not have it)."""
    metrics = copy.get("metrics") or {}
    value = metrics.get(metric) if metric and metric in metrics else copy.get("score")
    return float(value) if isinstance(value, int | float) else None
