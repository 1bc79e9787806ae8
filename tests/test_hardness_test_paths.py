"""Issue 26 item 15: the test suite writes under its own temporary directories, never a fixed
shared path that concurrent runs fight over (``/tmp/tierload-test-credentials-<uid>.log`` was one)."""

from __future__ import annotations


def test_the_credential_providers_log_is_in_the_sessions_own_directory(ray_session, tmp_path_factory):
    import rotating_credentials

    log = rotating_credentials.log_path() if hasattr(rotating_credentials, "log_path") else rotating_credentials.LOG
    assert tmp_path_factory.getbasetemp() in log.parents, log
