"""Credential providers of two jobs (tests/test_job_credential_provider.py), imported by the node
cache actor (tests/ is on its path): each returns its own access key, so the fault-injecting
proxy's count of signed requests per key tells whose provider signed a read."""

from __future__ import annotations

KEY_A = "PROVIDEDKEYAAAAAAAAA"
KEY_B = "PROVIDEDKEYBBBBBBBBB"


def team_a() -> dict:
    return {"key": KEY_A, "secret": "secret-a"}


def team_b() -> dict:
    return {"key": KEY_B, "secret": "secret-b"}
