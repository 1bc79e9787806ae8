import asyncio, hashlib, json, multiprocessing, sys, time
sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[2]))
from cold_read_ranges import _serve, _raw_ceiling
N=int(sys.argv[1]) if len(sys.argv)>1 else 4000
SIZE=4096
def main():
    from tierload.config.loading import load_config
    from tierload.stores.cold.source import ColdSource
    import obstore
    from obstore.store import S3Store
    ports = multiprocessing.Queue()
    server = multiprocessing.Process(target=_serve, args=(ports, N, SIZE, 0.02), daemon=True); server.start()
    endpoint = f"http://127.0.0.1:{ports.get(timeout=30)}"
    keys = [f"obj-{i:05d}" for i in range(N)]
    etags = {k: f'"{hashlib.md5(i.to_bytes(4,"little")*(SIZE//4)).hexdigest()}"' for i,k in enumerate(keys)}
    options = {"key": "k", "secret": "s", "client_kwargs": {"endpoint_url": endpoint, "region_name": "us-east-1"}}
    engine = ColdSource("s3://bench", load_config({"cold": {"storage_options": options, "max_in_flight": 256, "s3_engine": "obstore"}}).cold)
    reqs = [(f"s3://bench/{k}", etags[k], 0, SIZE) for k in keys]
    engine.read_ranges(reqs[:50])
    store = S3Store("bench", endpoint=endpoint, access_key_id="k", secret_access_key="s", region="us-east-1",
                    client_options={"allow_http": True, "pool_max_idle_per_host": "256"})
    async def raw():
        sem = asyncio.Semaphore(256)
        async def one(k):
            async with sem:
                r = await obstore.get_range_async(store, k, start=0, end=SIZE)
                return bytes(r)
        return await asyncio.gather(*(one(k) for k in keys))
    asyncio.run(raw())
    async def two():
        sem = asyncio.Semaphore(256)
        async def one(k):
            async with sem:
                r = await obstore.get_async(store, k, options={"range": (0, SIZE), "if_match": etags[k]})
                return bytes(await r.bytes_async())
        return await asyncio.gather(*(one(k) for k in keys))
    async def twosync():
        sem = asyncio.Semaphore(256)
        async def one(k):
            async with sem:
                r = await obstore.get_async(store, k, options={"range": (0, SIZE), "if_match": etags[k]})
                return bytes(r.bytes())
        return await asyncio.gather(*(one(k) for k in keys))
    def m(name, fn):
        t, c = time.perf_counter(), time.process_time(); fn()
        w = time.perf_counter()-t; cc = time.process_time()-c
        print(json.dumps({"v": name, "obj_s": round(N/w), "cpu_us": round(cc/N*1e6)}), flush=True)
    for rep in range(3):
        m("tierload", lambda: engine.read_ranges(reqs))
        m("raw_range", lambda: asyncio.run(raw()))
        m("raw_get_bytes_async", lambda: asyncio.run(two()))
        m("raw_get_bytes_sync", lambda: asyncio.run(twosync()))
    server.kill()
main()
