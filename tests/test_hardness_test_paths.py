"""Issue 26 item 15: the test suite writes under its own temporary directories, never a fixed
shared path that concurrent runs fight over (``/tmp/tierload-test-credentials-<uid>.log`` was one)."""

from __future__ import annotations

import ast
from pathlib import Path


def test_the_credential_providers_log_is_in_the_sessions_own_directory(ray_session, tmp_path_factory):
    import rotating_credentials

    log = rotating_credentials.log_path() if hasattr(rotating_credentials, "log_path") else rotating_credentials.LOG
    assert tmp_path_factory.getbasetemp() in log.parents, log


# Absolute paths the tests name that are never written: the documented default (compared, not
# used) and an endpoint message's socket path (pickled, never bound).
_NAMED_NOT_WRITTEN = {("test_dir_trust.py", "/tmp/tierload-"), ("test_messages.py", "/tmp/x.sock")}


def _temp_root(node: ast.AST) -> bool:
    """Whether ``node`` holds a call of ``tempfile.gettempdir()`` (the shared temporary directory)."""
    return any(isinstance(n, ast.Call) and getattr(n.func, "attr", getattr(n.func, "id", None)) == "gettempdir"
               for n in ast.walk(node))


def _fixed_name(node: ast.AST) -> bool:
    return isinstance(node, (ast.Constant, ast.JoinedStr))


def test_no_test_names_a_fixed_path_in_a_shared_temporary_directory():
    """The kind, not only the credentials log: no string in the tests' sources (f-strings' fixed
    parts included) starts a path in ``/tmp``, ``/var/tmp`` or ``/dev/shm`` but those named above,
    and no fixed name is joined to ``tempfile.gettempdir()`` (the credentials log's old spelling:
    ``Path(tempfile.gettempdir()) / f"tierload-test-credentials-{os.getuid()}.log"``)."""
    found = []
    for source in sorted(set(Path(__file__).parent.rglob("*.py")) - {Path(__file__)}):  # this file names them
        for node in ast.walk(ast.parse(source.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) \
                    and node.value.startswith(("/tmp/", "/var/tmp/", "/dev/shm/")) \
                    and (source.name, node.value) not in _NAMED_NOT_WRITTEN:
                found.append(f"{source.name}:{node.lineno}: {node.value!r}")
            joined = [node.left, node.right] if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div) else \
                node.args if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "join" else []
            if any(_temp_root(part) for part in joined) and any(_fixed_name(part) for part in joined):
                found.append(f"{source.name}:{node.lineno}: a fixed name in the shared temporary directory")
    assert found == []
