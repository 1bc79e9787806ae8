"""How fast an S3 endpoint serves GETs: the raw server, or the emulated link in front of it.

Plain HTTP GETs of presigned URLs (signed up front, so no SDK runs while the clock does),
``concurrency`` at a time, over the dataset's objects, for at most ``seconds``. Used to print
the link bound of a benchmark: the lower of the configured cap and what the server can serve
here; and (:func:`measure_unsigned`) the ceiling of the emulated S3's own buckets.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass


@dataclass(frozen=True)
class Throughput:
    """Result of one probe.

    Attributes:
        objects: GETs completed.
        bytes: Body bytes received.
        seconds: Wall time.
        concurrency: GETs in flight.
    """

    objects: int
    bytes: int
    seconds: float
    concurrency: int

    @property
    def mb_s(self) -> float:
        return self.bytes / self.seconds / 1e6 if self.seconds else 0.0


def presigned_urls(endpoint_url: str, bucket: str, keys: list[str], credentials: dict) -> list[str]:
    """Presigned GET URLs of ``keys`` on ``endpoint_url`` (credentials: s3fs-style key/secret)."""
    import botocore.session

    client = botocore.session.get_session().create_client(
        "s3", endpoint_url=endpoint_url, region_name="us-east-1", aws_access_key_id=credentials["key"],
        aws_secret_access_key=credentials["secret"])
    return [client.generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": key}, ExpiresIn=3600)
            for key in keys]


async def _probe(urls: list[str], concurrency: int, seconds: float) -> Throughput:
    import aiohttp

    queue = list(reversed(urls))
    done = [0, 0]
    deadline = time.monotonic() + seconds

    async def worker(session) -> None:
        while queue and time.monotonic() < deadline:
            url = queue.pop()
            async with session.get(url) as response:
                response.raise_for_status()
                body = await response.read()
            done[0] += 1
            done[1] += len(body)

    start = time.monotonic()
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=concurrency)) as session:
        await asyncio.gather(*(worker(session) for _ in range(concurrency)))
    return Throughput(done[0], done[1], time.monotonic() - start, concurrency)


def measure_unsigned(endpoint_url: str, bucket: str, keys: list[str], concurrency: int = 256,
                     seconds: float = 60.0) -> Throughput:
    """GET ``keys`` as plain unsigned URLs (for buckets the emulated S3 serves itself, which
    need no signature): a client with no SDK cost, so the result is the server's own ceiling.

    Raises:
        aiohttp.ClientResponseError: A GET failed.
    """
    from urllib.parse import quote

    base = f"{endpoint_url.rstrip('/')}/{bucket}/"
    return asyncio.run(_probe([base + quote(key) for key in keys], concurrency, seconds))


def measure(endpoint_url: str, bucket: str, keys: list[str], credentials: dict, concurrency: int = 16,
            seconds: float = 8.0) -> Throughput:
    """GET ``keys`` (in order, each once) from ``endpoint_url`` for at most ``seconds``.

    Raises:
        aiohttp.ClientResponseError: A GET failed.
    """
    urls = presigned_urls(endpoint_url.rstrip("/"), bucket, keys, credentials)
    return asyncio.run(_probe(urls, concurrency, seconds))
