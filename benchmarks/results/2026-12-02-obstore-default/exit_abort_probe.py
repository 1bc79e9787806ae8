import sys, subprocess, pickle, os, tempfile
from tierload_tools.s3local import LocalS3
from tierload.config.models import ColdConfig
from tierload.stores.cold.location import ColdLocation
from tierload.stores.cold.source import ColdSource
s3 = LocalS3(); s3.start()
fs = s3.create_bucket("bkt"); fs.pipe("bkt/ds/a.bin", b"x"*500)
READER = """
import pickle, sys
location, config, url, version, size = pickle.loads(sys.stdin.buffer.read())
from tierload.stores.cold.source import ColdSource
source = ColdSource(location, config)
sys.stdout.write(str(len(source.read(url, version, 0, size))) + " " + str(len(source.read(url, version, 0, size))))
import os
if False:
    import atexit, gc
    from tierload.stores.cold import obstore_stores
    def _quiet():
        obstore_stores._stores.clear()
    atexit.register(_quiet)
"""
tmp = tempfile.mkdtemp()
cred = os.path.join(tmp, "credentials")
open(cred, "w").write(f"[p]\naws_access_key_id = {s3.storage_options['key']}\naws_secret_access_key = {s3.storage_options['secret']}\n")
for mode in ("profile", "static"):
    if mode == "profile":
        os.environ["AWS_SHARED_CREDENTIALS_FILE"] = cred; os.environ["AWS_PROFILE"] = "p"
        opts = {"client_kwargs": s3.storage_options["client_kwargs"]}
    else:
        os.environ.pop("AWS_PROFILE", None)
        opts = s3.storage_options
    config = ColdConfig(storage_options=opts)
    source = ColdSource(ColdLocation.resolve("s3://bkt/ds", config), config)
    obj = source.list_objects()[0]
    codes = []
    env = {"PATH": "/usr/bin:/bin", "HOME": "/nonexistent", "FIX": os.environ.get("FIX", "")}
    for i in range(60):
        r = subprocess.run([sys.executable, "-c", READER], input=pickle.dumps((source.location, config, obj.url, obj.version, obj.size)), capture_output=True, env=env)
        codes.append(r.returncode)
        if r.returncode: last = r.stderr.decode()[-1500:]
    print(mode, codes, flush=True)
    if any(codes): print(last)
s3.stop()
