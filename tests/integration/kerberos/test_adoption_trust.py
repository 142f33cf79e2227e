"""Which applications a run adopts with Kerberos: the YARN application user of a ticket cache is its principal's
short name (the session's real MIT KDC). The other adoption checks are in
tests/unit/airflow_tfos/operators/test_run_adoption_trust.py."""

from __future__ import annotations

from tests.unit.airflow_tfos.operators.test_run_adoption_trust import yarn_hook


def test_with_kerberos_and_a_ticket_cache_the_application_user_is_its_principals(kdc, tmp_path, monkeypatch):
    ccache = f"FILE:{tmp_path / 'ccache'}"
    kdc.kinit("alice", kdc.alice_keytab, ccache)
    monkeypatch.setenv("KRB5CCNAME", ccache)
    assert yarn_hook(monkeypatch, login="someone", auth="kerberos").application_user == "alice"
