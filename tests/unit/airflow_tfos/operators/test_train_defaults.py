"""Each setting of a run has one default, the spec's: the TF cluster's arguments and the operators' take theirs from
:class:`~airflow_tfos.shared.spec.RunSpec`."""

from __future__ import annotations

from airflow_tfos.runtime import TFClusterRun
from airflow_tfos.shared.spec import RunSpec


def _defaults(callable_) -> dict:
    import inspect

    return {name: p.default for name, p in inspect.signature(callable_).parameters.items() if p.default is not p.empty}


def test_every_setting_has_one_default_the_specs():
    # A default written anywhere else is a second place to change, and a chance to differ: the cluster's
    # arguments, the operators' and the feed's must each equal the spec's (which they take it from).
    from dataclasses import MISSING, fields

    from airflow_tfos.operators.train import SPEC_ARGUMENTS, TFoSLaunchClusterOperator, TFoSTrainOperator

    spec_defaults = {
        f.name: f.default_factory() if f.default_factory is not MISSING else f.default
        for f in fields(RunSpec)
        if f.default is not MISSING or f.default_factory is not MISSING
    }
    argument = {v: k for k, v in SPEC_ARGUMENTS.items()}
    checked = 0
    for callable_ in (TFClusterRun.__init__, TFoSTrainOperator.__init__, TFoSLaunchClusterOperator.__init__):
        for name, default in _defaults(callable_).items():
            field_name = argument.get(name, name)
            given = ("num_workers", "num_nodes", "env", "train_fn")  # given, or added to
            if field_name in spec_defaults and name not in given:
                wanted = spec_defaults[field_name]
                if isinstance(default, tuple):  # a sequence argument's immutable default: the spec's empty list
                    default = list(default)
                assert default == wanted, (callable_.__qualname__, name, default, wanted)
                checked += 1
    assert checked >= 20
