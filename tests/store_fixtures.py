"""Session fixtures: one server per store (per xdist worker), on 127.0.0.1 and a free port.

Loaded by tests/conftest.py (``pytest_plugins``). Azurite comes from npm: .ci/run installs it
into .ci/npm, and the tests do where npm is on PATH; where npm and Azurite are both missing, the
Azure tests skip saying so.
"""

from __future__ import annotations

import pytest
from gcs_preconditions import CheckedGcs, GcsPreconditions
from store_servers import Azurite, FakeGcs, RangeFileServer, azurite_command


@pytest.fixture(scope="session")
def http_store(tmp_path_factory):
    """A Range/ETag/If-Match HTTP file server over a fresh directory: ``server.root``, ``server.url``."""
    with RangeFileServer(str(tmp_path_factory.mktemp("http-store"))) as server:
        yield server


@pytest.fixture(scope="session")
def gcs_store():
    """fake-gcs-server, in memory."""
    with FakeGcs() as server:
        yield server


@pytest.fixture(scope="session")
def gcs_checked_store(gcs_store):
    """fake-gcs-server read through tests/gcs_preconditions.py's proxy, which enforces ``If-Match``
    and ``x-goog-if-generation-match`` on reads as real GCS does (the emulator ignores both)."""
    with GcsPreconditions(gcs_store.url) as proxy:
        yield CheckedGcs(gcs_store, proxy)


@pytest.fixture(scope="session")
def azure_store():
    """Azurite's Blob service, in memory."""
    command = azurite_command()
    if command is None:
        pytest.skip("Azurite is not installed here: `npm install --prefix .ci/npm azurite@3.37.0` (as .ci/run does) "
                    "or set TIERLOAD_AZURITE to its azurite-blob")
    with Azurite(command) as server:
        yield server
