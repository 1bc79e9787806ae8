"""The lean SigV4 signer gives every header botocore's own S3 signer gives, byte for byte.

The lean path's requests are also checked end to end (the fault-injecting proxy recomputes
each signature with botocore: tests/test_s3_lean.py); here the comparison is direct, over the
cases a GET can take: with and without a session token, range and If-Match, keys that need
percent-encoding, a path-style and a virtual-host prefix, a date change.
"""

from __future__ import annotations

import datetime

import botocore.auth
import pytest
from botocore.auth import EMPTY_SHA256_HASH, S3SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from botocore.utils import percent_encode

from tierload.stores.cold.s3fast.sigv4_get import amz_date, sign_get, signing_key

NOW = datetime.datetime(2026, 11, 30, 23, 59, 59, 750000, tzinfo=datetime.timezone.utc)


def botocore_headers(monkeypatch, credentials, region, url, host, extra, when=NOW) -> dict[str, str]:
    monkeypatch.setattr(botocore.auth, "get_current_datetime", lambda: when)
    request = AWSRequest(method="GET", url=url, headers={"Host": host, **extra})
    S3SigV4Auth(credentials, "s3", region).add_auth(request)
    return dict(request.headers.items())


CASES = [
    ("http://127.0.0.1:5000/bucket/", "127.0.0.1:5000", "ds/c001/img 0001.jpg", {}),
    ("http://127.0.0.1:5000/bucket/", "127.0.0.1:5000", "ds/x", {"Range": "bytes=0-4095"}),
    ("https://bucket.s3.eu-west-1.amazonaws.com/", "bucket.s3.eu-west-1.amazonaws.com", "a/ü+%?#=&~b",
     {"Range": "bytes=10-19", "If-Match": '"9b2cf535f27731c974343645a3985328"'}),
    ("http://localhost:9000/b/", "localhost:9000", "k", {"If-Match": '"  spaced   etag "'}),
]


@pytest.mark.parametrize("token", [None, "FQoGZXIvYXdzEJr//////////token+/="])
@pytest.mark.parametrize("prefix, host, key, extra", CASES)
def test_headers_equal_botocore_s3_signer(monkeypatch, token, prefix, host, key, extra):
    credentials = Credentials("AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", token)
    region = "eu-west-1" if "eu-west-1" in host else "us-east-1"
    encoded = percent_encode(key, safe="/~")
    want = botocore_headers(monkeypatch, credentials, region, prefix + encoded, host, extra)
    path = prefix.split("/", 3)[3] if prefix.count("/") > 3 else ""
    got = sign_get(credentials.get_frozen_credentials(), region, "s3", host, "/" + path + encoded, extra,
                   now=NOW.timestamp())
    assert got == want
    assert got["X-Amz-Content-SHA256"] == EMPTY_SHA256_HASH


def test_a_new_day_gets_a_new_signing_key_and_scope(monkeypatch):
    credentials = Credentials("AKIDEXAMPLE", "secret", None)
    later = NOW + datetime.timedelta(seconds=1)  # 2026-12-01T00:00:00Z
    for when in (NOW, later):
        want = botocore_headers(monkeypatch, credentials, "us-east-1", "http://h:1/b/k", "h:1", {}, when)
        got = sign_get(credentials.get_frozen_credentials(), "us-east-1", "s3", "h:1", "/b/k", {},
                       now=when.timestamp())
        assert got == want
    assert amz_date(later.timestamp()) == "20261201T000000Z"
    assert signing_key("secret", "20261130", "us-east-1", "s3") != signing_key("secret", "20261201", "us-east-1", "s3")


def test_a_different_secret_signs_differently():
    """The cached key is per secret: rotated credentials never sign with the old secret's key."""
    old, new = Credentials("AK", "old-secret", None), Credentials("AK", "new-secret", None)
    signed = [sign_get(c.get_frozen_credentials(), "us-east-1", "s3", "h:1", "/b/k", {}, now=NOW.timestamp())
              for c in (old, new)]
    assert signed[0]["Authorization"] != signed[1]["Authorization"]
