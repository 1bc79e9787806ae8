"""Objects/s of ColdSource.read_ranges vs the per-object path, at 20 ms per request.

The rig: a minimal S3 GET server in a child process that serves object bodies from memory
(Range, ETag, If-Match), answering no request before ``--latency-ms`` have passed. moto is
not in the path: it answers only ~300 small GETs/s on a small machine and would be measured
instead of the client. Compared, on the same objects:

* per object: ``--threads`` threads (the old fetcher's ``prefetch.concurrency``, 16) each
  calling ``ColdSource.read`` for one object at a time;
* ``read_ranges`` through aiobotocore (``cold.s3_engine: aiobotocore``): one call for all
  objects, ``cold.max_in_flight`` requests in flight;
* ``read_ranges`` through obstore (the default engine, ``cold.s3_engine: obstore``; until
  2026-12-02 this line measured the hand-written lean path that obstore replaced);
* the rig's own ceiling: raw aiohttp GETs at the same number in flight, no S3 client, no signing.

The target (set for the lean path by an earlier issue, kept for the engine that replaced it):
>= 0.8x the rig's ceiling or >= 5,000 objects/s, whichever is lower (``target_objects_s``).

Also printed: the client's CPU time per object on each path (``time.process_time``: every
thread of the process, obstore's Rust runtime included), which a loaded machine distorts less
than objects/s.

Run: ``nice -n 19 python benchmarks/cold_read_ranges.py`` (prints one JSON line).
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import multiprocessing
import time
from concurrent.futures import ThreadPoolExecutor


def _serve(port_queue, count: int, size: int, latency_s: float) -> None:
    from aiohttp import web

    bodies = {f"obj-{i:05d}": i.to_bytes(4, "little") * (size // 4) for i in range(count)}
    etags = {key: f'"{hashlib.md5(body).hexdigest()}"' for key, body in bodies.items()}

    async def get(request):
        await asyncio.sleep(latency_s)
        key = request.match_info["key"]
        body, etag = bodies[key], etags[key]
        if request.headers.get("If-Match", etag) != etag:
            return web.Response(status=412, content_type="application/xml",
                                body=b"<Error><Code>PreconditionFailed</Code></Error>")
        first, last, status = 0, len(body) - 1, 200
        if "Range" in request.headers:
            first_text, last_text = request.headers["Range"].removeprefix("bytes=").split("-")
            first, last, status = int(first_text), min(int(last_text), len(body) - 1), 206
        headers = {"ETag": etag, "Content-Type": "binary/octet-stream"}
        if status == 206:
            headers["Content-Range"] = f"bytes {first}-{last}/{len(body)}"
        return web.Response(status=status, body=body[first:last + 1], headers=headers)

    async def main() -> None:
        app = web.Application()
        app.router.add_get("/bench/{key}", get)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0, backlog=4096)
        await site.start()
        port_queue.put(site._server.sockets[0].getsockname()[1])
        await asyncio.Event().wait()

    asyncio.run(main())


async def _raw_ceiling(endpoint: str, keys: list[str], in_flight: int) -> float:
    import aiohttp

    limit = asyncio.Semaphore(in_flight)
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=in_flight)) as session:
        async def one(key: str) -> None:
            async with limit, session.get(f"{endpoint}/bench/{key}") as response:
                await response.read()

        start = time.perf_counter()
        await asyncio.gather(*(one(key) for key in keys))
        return len(keys) / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--objects", type=int, default=2000)
    parser.add_argument("--size", type=int, default=4096)
    parser.add_argument("--latency-ms", type=float, default=20.0)
    parser.add_argument("--threads", type=int, default=16)
    parser.add_argument("--max-in-flight", type=int, default=256)
    args = parser.parse_args()

    from tierload.config.loading import load_config
    from tierload.stores.cold.source import ColdSource

    ports: multiprocessing.Queue = multiprocessing.Queue()
    server = multiprocessing.Process(target=_serve, args=(ports, args.objects, args.size, args.latency_ms / 1000),
                                     daemon=True)
    server.start()
    endpoint = f"http://127.0.0.1:{ports.get(timeout=30)}"
    try:
        keys = [f"obj-{i:05d}" for i in range(args.objects)]
        etags = {key: f'"{hashlib.md5(i.to_bytes(4, "little") * (args.size // 4)).hexdigest()}"'
                 for i, key in enumerate(keys)}
        options = {"key": "k", "secret": "s", "client_kwargs": {"endpoint_url": endpoint, "region_name": "us-east-1"}}
        cold = {"storage_options": options, "max_in_flight": args.max_in_flight}
        requests = [(f"s3://bench/{key}", etags[key], 0, args.size) for key in keys]
        old = ColdSource("s3://bench", load_config({"cold": {**cold, "s3_engine": "aiobotocore"}}).cold)
        engine = ColdSource("s3://bench", load_config({"cold": {**cold, "s3_engine": "obstore"}}).cold)
        for source in (old, engine):
            source.read_ranges(requests[:50])  # connections and clients warmed for every path

        start, cpu = time.perf_counter(), time.process_time()
        with ThreadPoolExecutor(args.threads) as pool:
            one_by_one = list(pool.map(lambda request: old.read(*request), requests))
        per_object = args.objects / (time.perf_counter() - start)
        per_object_cpu_us = (time.process_time() - cpu) / args.objects * 1e6

        rates, cpu_us = {}, {}
        for name, source in (("aiobotocore", old), ("obstore", engine)):
            start, cpu = time.perf_counter(), time.process_time()
            together = source.read_ranges(requests)
            rates[name] = args.objects / (time.perf_counter() - start)
            cpu_us[name] = (time.process_time() - cpu) / args.objects * 1e6
            assert together == one_by_one and all(len(data) == args.size for data in together)

        start, cpu = time.perf_counter(), time.process_time()
        ceiling = asyncio.run(_raw_ceiling(endpoint, keys, args.max_in_flight))
        ceiling_cpu_us = (time.process_time() - cpu) / args.objects * 1e6
        target = min(0.8 * ceiling, 5000)
        print(json.dumps({
            "objects": args.objects, "size_bytes": args.size, "latency_ms": args.latency_ms,
            "per_object_threads": args.threads, "max_in_flight": args.max_in_flight,
            "objects_s": {"per_object_threads": round(per_object),
                          "read_ranges_aiobotocore": round(rates["aiobotocore"]),
                          "read_ranges_obstore": round(rates["obstore"]), "rig_ceiling_raw_aiohttp": round(ceiling)},
            "client_cpu_us_per_object": {"per_object_threads": round(per_object_cpu_us),
                                         "read_ranges_aiobotocore": round(cpu_us["aiobotocore"]),
                                         "read_ranges_obstore": round(cpu_us["obstore"]),
                                         "rig_ceiling_raw_aiohttp": round(ceiling_cpu_us)},
            "obstore_vs_aiobotocore": round(rates["obstore"] / rates["aiobotocore"], 2),
            "obstore_vs_rig_ceiling": round(rates["obstore"] / ceiling, 2),
            "target_objects_s": round(target), "obstore_meets_target": rates["obstore"] >= target,
            "per_object_bound_objects_s": round(args.threads / (args.latency_ms / 1000)),
        }))
    finally:
        server.kill()


if __name__ == "__main__":
    main()
