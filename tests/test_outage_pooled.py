"""A connection obstore kept alive dies in an outage (case F03's flake): the read waits out the outage.

Found in a full suite run on 2026-12-02: ``test_an_epoch_survives_a_10s_outage`` failed with
``EndpointUnreachableError: ... HTTP error: error sending request; gave up after 3 requests``.
reqwest says "error sending request" when a request cannot be sent on a connection (refused, or a
kept-alive one closed under it), and obstore's message carries no other word of it: that read was
counted as an object's failure (``cold.max_attempts``) instead of the endpoint's (``cold.outage_budget_s``).
"""

from __future__ import annotations

from cases_common import proxied
from faulty_s3 import FaultyS3
from test_cold_async import put_objects, source_for

from tierload.stores.cold.errors import error_code, translate_error
from tierload.stores.cold.obstore_reads import shaped_error
from tierload.stores.cold.retry import Failure, classify


def test_error_sending_request_is_the_endpoints_failure():
    """obstore's text of that failure, as the suite's run logged it, is shaped as a connection reset."""
    from obstore.exceptions import GenericError

    shaped = shaped_error(GenericError("Generic S3 error: Error performing GET  in 235.302µs - HTTP error: "
                                       "error sending request"))
    assert isinstance(shaped, ConnectionResetError)
    error = translate_error(shaped, "s3://bucket/key")
    assert classify(error, error_code(shaped), [type(shaped).__name__]) is Failure.DOWN


def test_reads_on_kept_alive_connections_wait_out_a_short_outage(s3, bucket):
    name, fs = bucket
    payloads = put_objects(fs, f"{name}/ds", 1, 1000)
    with FaultyS3(s3.endpoint_url) as proxy:
        source = source_for(f"s3://{name}/ds", proxied(s3, proxy), max_attempts=2, s3_engine="obstore")
        obj = source.list_objects()[0]
        payload = payloads[obj.url.removeprefix("s3://")]
        for _ in range(4):  # connections in obstore's pool, kept alive by the proxy
            assert source.read(obj.url, obj.version, 0, obj.size) == payload
        reopened = proxy.refuse_connections_for(4)
        assert source.read(obj.url, obj.version, 0, obj.size) == payload
        assert reopened.is_set()  # it was answered only once the endpoint was back
