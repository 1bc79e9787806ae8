"""S3's answers for a bucket the emulated S3 serves itself (see :mod:`tierload_tools.bench.own_buckets`).

What a client (botocore, s3fs, aiohttp) sees is S3's REST API for the requests a loader
makes; the parts implemented and their semantics:

* ``GET /bucket/key``: 200 with the body, ``ETag``, ``Content-Length``, ``Last-Modified``,
  ``Accept-Ranges``; ``Range: bytes=a-b`` (also ``a-`` and ``-n``) gives 206 with
  ``Content-Range``, an unsatisfiable range 416 ``InvalidRange``; ``If-Match`` that differs
  from the ETag gives 412 ``PreconditionFailed``, ``If-None-Match`` that equals it 304; a
  missing key 404 ``NoSuchKey``.
* ``HEAD /bucket/key``: the same headers without a body (404 without a body when missing).
* ``GET /bucket?list-type=2``: ListObjectsV2 with ``prefix``, ``delimiter`` (common
  prefixes), ``max-keys`` (at most 1000), ``start-after``, ``continuation-token`` and
  ``encoding-type=url``. ``GET /bucket?location`` and ``HEAD /bucket`` answer as for an
  existing bucket in us-east-1.
* Anything else (PUT, DELETE, multipart, versions): 501 ``NotImplemented``; these buckets are
  read-only.

Requests are not authenticated (moto's server does not check signatures either).
"""

from __future__ import annotations

import base64
import uuid
from dataclasses import dataclass
from urllib.parse import quote
from xml.sax.saxutils import escape

from tierload_tools.bench.own_buckets import OwnBucket

LAST_MODIFIED_HTTP = "Thu, 01 Jan 2026 00:00:00 GMT"
LAST_MODIFIED_ISO = "2026-01-01T00:00:00.000Z"
MAX_KEYS = 1000
_XML_HEAD = '<?xml version="1.0" encoding="UTF-8"?>\n'
_NS = ' xmlns="http://s3.amazonaws.com/doc/2006-03-01/"'


@dataclass
class Answer:
    """An HTTP response: status, headers and body (``body`` is None for HEAD)."""

    status: int
    headers: dict[str, str]
    body: bytes | None
    kind: str  # "get", "head", "list" or "other": which counter it goes to


def _error(status: int, code: str, message: str, resource: str, head: bool = False) -> Answer:
    body = (f"{_XML_HEAD}<Error><Code>{code}</Code><Message>{escape(message)}</Message>"
            f"<Resource>{escape(resource)}</Resource><RequestId>{uuid.uuid4().hex[:16]}</RequestId></Error>")
    return Answer(status, {"Content-Type": "application/xml"}, None if head else body.encode(), "other")


def parse_range(header: str, size: int) -> tuple[int, int] | None:
    """``bytes=a-b`` / ``bytes=a-`` / ``bytes=-n`` -> ``[start, end)`` within ``size``.

    Returns:
        None if the range cannot be satisfied (start past the end, or a malformed header).
    """
    unit, _, spec = header.partition("=")
    first, dash, last = spec.strip().partition("-")
    if unit.strip() != "bytes" or not dash or "," in spec:
        return None
    try:
        if not first:  # suffix range: the last n bytes
            count = int(last)
            return (max(0, size - count), size) if count > 0 and size > 0 else None
        start = int(first)
        end = min(size, int(last) + 1) if last else size
    except ValueError:
        return None
    return (start, end) if start < size and end > start else None


def object_answer(bucket: OwnBucket, bucket_name: str, key: str, method: str, headers) -> Answer:
    """GET or HEAD of ``key`` (see the module docstring for the semantics)."""
    head = method == "HEAD"
    kind = "head" if head else "get"
    index = bucket.find(key)
    if index is None:
        answer = _error(404, "NoSuchKey", "The specified key does not exist.", f"/{bucket_name}/{key}", head)
        answer.kind = kind
        return answer
    size, etag = bucket.size(index), bucket.etag(index)
    out = {"ETag": etag, "Last-Modified": LAST_MODIFIED_HTTP, "Accept-Ranges": "bytes",
           "Content-Type": "application/octet-stream", "x-amz-request-id": uuid.uuid4().hex[:16]}
    if_match, if_none_match = headers.get("If-Match"), headers.get("If-None-Match")
    if if_match is not None and if_match.strip() not in ("*", etag):
        answer = _error(412, "PreconditionFailed", "At least one of the pre-conditions you specified did not hold",
                        "If-Match", head)
        answer.kind = kind
        return answer
    if if_none_match is not None and if_none_match.strip() in ("*", etag):
        return Answer(304, {"ETag": etag}, None, kind)
    status, start, end = 200, 0, size
    range_header = headers.get("Range")
    if range_header:
        span = parse_range(range_header, size)
        if span is None:
            answer = _error(416, "InvalidRange", "The requested range is not satisfiable", range_header, head)
            answer.headers["Content-Range"] = f"bytes */{size}"
            answer.kind = kind
            return answer
        status, (start, end) = 206, span
        out["Content-Range"] = f"bytes {start}-{end - 1}/{size}"
    out["Content-Length"] = str(end - start)
    return Answer(status, out, None if head else bucket.body(index, start, end), kind)


def _token(key: str) -> str:
    return base64.urlsafe_b64encode(key.encode()).decode()


def _untoken(token: str) -> str:
    return base64.urlsafe_b64decode(token.encode()).decode()


def list_answer(bucket: OwnBucket, bucket_name: str, query) -> Answer:
    """ListObjectsV2 (see the module docstring for the parameters supported)."""
    prefix, delimiter = query.get("prefix", ""), query.get("delimiter", "")
    url_encoded = query.get("encoding-type") == "url"
    try:
        max_keys = min(MAX_KEYS, int(query.get("max-keys", MAX_KEYS)))
        start_key = _untoken(query["continuation-token"]) if "continuation-token" in query else ""
    except ValueError:
        return _error(400, "InvalidArgument", "bad max-keys or continuation-token", f"/{bucket_name}")
    after = query.get("start-after", "")
    index = bucket.first_at_or_after(max(start_key, prefix))
    if after and not start_key:
        index = max(index, bucket.first_at_or_after(after + "\0"))

    def name(value: str) -> str:
        return escape(quote(value, safe="/") if url_encoded else value)

    contents, prefixes, count, total = [], [], 0, len(bucket)
    while index < total and count < max_keys:
        key = bucket.key(index)
        if not key.startswith(prefix):
            break
        cut = key.find(delimiter, len(prefix)) if delimiter else -1
        if cut >= 0:
            common = key[:cut + len(delimiter)]
            prefixes.append(f"<CommonPrefixes><Prefix>{name(common)}</Prefix></CommonPrefixes>")
            index = bucket.first_at_or_after(common[:-1] + chr(ord(common[-1]) + 1))
        else:
            contents.append(f"<Contents><Key>{name(key)}</Key><LastModified>{LAST_MODIFIED_ISO}</LastModified>"
                            f"<ETag>{escape(bucket.etag(index))}</ETag><Size>{bucket.size(index)}</Size>"
                            "<StorageClass>STANDARD</StorageClass></Contents>")
            index += 1
        count += 1
    truncated = index < total and bucket.key(index).startswith(prefix)
    parts = [f"{_XML_HEAD}<ListBucketResult{_NS}><Name>{escape(bucket_name)}</Name><Prefix>{name(prefix)}</Prefix>",
             f"<KeyCount>{count}</KeyCount><MaxKeys>{max_keys}</MaxKeys>",
             f"<Delimiter>{name(delimiter)}</Delimiter>" if delimiter else "",
             f"<IsTruncated>{'true' if truncated else 'false'}</IsTruncated>", *contents, *prefixes]
    if "continuation-token" in query:
        parts.append(f"<ContinuationToken>{escape(query['continuation-token'])}</ContinuationToken>")
    if truncated:
        parts.append(f"<NextContinuationToken>{_token(bucket.key(index))}</NextContinuationToken>")
    if after:
        parts.append(f"<StartAfter>{name(after)}</StartAfter>")
    if url_encoded:
        parts.append("<EncodingType>url</EncodingType>")
    parts.append("</ListBucketResult>")
    return Answer(200, {"Content-Type": "application/xml"}, "".join(parts).encode(), "list")


def answer(bucket: OwnBucket, bucket_name: str, key: str, method: str, headers, query) -> Answer:
    """Dispatch one request on an own bucket (``key`` empty: a bucket-level request)."""
    if key:
        if method in ("GET", "HEAD"):
            return object_answer(bucket, bucket_name, key, method, headers)
        return _error(501, "NotImplemented", f"{method} on a read-only emulated bucket", f"/{bucket_name}/{key}")
    if method == "HEAD":
        return Answer(200, {"x-amz-bucket-region": "us-east-1"}, None, "head")
    if method == "GET" and "location" in query:
        body = f"{_XML_HEAD}<LocationConstraint{_NS}></LocationConstraint>".encode()
        return Answer(200, {"Content-Type": "application/xml"}, body, "other")
    if method == "GET" and query.get("list-type") == "2":
        return list_answer(bucket, bucket_name, query)
    return _error(501, "NotImplemented", f"{method} ?{'&'.join(query)} on an emulated bucket", f"/{bucket_name}")
