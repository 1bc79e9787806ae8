import asyncio, threading, time, multiprocessing
def serve(q):
    from aiohttp import web
    async def get(request):
        r = web.StreamResponse(status=206, headers={"ETag": '"e"', "Content-Length": "4096", "Content-Range": "bytes 0-4095/4096"})
        await r.prepare(request); await asyncio.sleep(0.5); await r.write(b"x"*4096); await r.write_eof(); return r
    async def main():
        app = web.Application(); app.router.add_get("/b/{k}", get)
        run = web.AppRunner(app); await run.setup(); s = web.TCPSite(run, "127.0.0.1", 0); await s.start()
        q.put(s._server.sockets[0].getsockname()[1]); await asyncio.Event().wait()
    asyncio.run(main())
q = multiprocessing.Queue(); p = multiprocessing.Process(target=serve, args=(q,), daemon=True); p.start(); port = q.get()
import obstore
from obstore.store import S3Store
store = S3Store("b", endpoint=f"http://127.0.0.1:{port}", access_key_id="k", secret_access_key="s", region="us-east-1", client_options={"allow_http": True})
count = 0; stop = False
def spin():
    global count
    while not stop: count += 1
t = threading.Thread(target=spin); t.start()
async def main():
    global count
    r = await obstore.get_async(store, "k", options={"range": (0, 4096)})
    c0 = count; t0 = time.perf_counter(); data = bytes(r.bytes()); dt = time.perf_counter() - t0
    print("bytes() waited", round(dt, 2), "s; other thread ran", count - c0, "iterations meanwhile; len", len(data))
try:
    asyncio.run(main())
finally:
    stop = True; t.join(); p.kill()
