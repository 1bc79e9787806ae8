"""Run tests/test_credentials.py's clean reader (two obstore reads, then a normal exit) N times; count exit codes.

    python repro.py N WORK_DIR    # WORK_DIR: the credential_process helper, its config, and core files

The cold location is resolved here under a `credential_process` profile (a key that expires in
5 minutes each call, as the test's); each reader process has no AWS setting and runs the process
itself through obstore's credential provider. Stops at the first non-zero exit, whose core file
(RLIMIT_CORE unlimited, kernel core_pattern "core") is left in WORK_DIR/cores.
"""
import collections, pickle, subprocess, sys, textwrap
from pathlib import Path
from tierload_tools.s3local import LocalS3
from tierload.config.models import ColdConfig
from tierload.stores.cold.location import ColdLocation
from tierload.stores.cold.source import ColdSource

READER = textwrap.dedent("""
    import pickle, sys
    location, config, url, version, size = pickle.loads(sys.stdin.buffer.read())
    from tierload.stores.cold.source import ColdSource
    source = ColdSource(location, config)
    sys.stdout.write(str(len(source.read(url, version, 0, size))) + " " + str(len(source.read(url, version, 0, size))))
""")
n = int(sys.argv[1])
work = Path(sys.argv[2])
(work / "cores").mkdir(parents=True, exist_ok=True)
import os
helper = work / "credentials.py"
calls = work / "calls"
helper.write_text(textwrap.dedent(f"""
    import datetime, json, os
    with open({str(calls)!r}, "a") as log:
        log.write(str(os.getpid()) + "\\n")
    count = sum(1 for _ in open({str(calls)!r}))
    expires = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(minutes=5)
    print(json.dumps({{"Version": 1, "AccessKeyId": f"PROCKEY{{count:013d}}", "SecretAccessKey": "s",
                      "Expiration": expires.isoformat()}}))
"""))
(work / "config").write_text(f"[profile rotating]\ncredential_process = {sys.executable} {helper}\n")
with LocalS3() as s3:
    fs = s3.create_bucket("abrt-bucket")
    fs.pipe_file("abrt-bucket/ds/a.bin", b"y" * 300)
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
        os.environ.pop(name, None)
    os.environ.update(AWS_PROFILE="rotating", AWS_CONFIG_FILE=str(work / "config"), AWS_SHARED_CREDENTIALS_FILE=str(work / "none"))
    config = ColdConfig(storage_options={"client_kwargs": {"endpoint_url": s3.endpoint_url, "region_name": "us-east-1"}},
                        s3_engine="obstore")
    source = ColdSource(ColdLocation.resolve("s3://abrt-bucket/ds", config), config)
    obj = source.list_objects()[0]
    payload = pickle.dumps((source.location, config, obj.url, obj.version, obj.size))
    codes = collections.Counter()
    for i in range(n):
        done = subprocess.run([sys.executable, "-c", READER], input=payload, capture_output=True,
                              env={"PATH": "/usr/bin:/bin", "HOME": "/nonexistent", "PYTHONFAULTHANDLER": "1"}, timeout=120, cwd=str(work / "cores"),
                              preexec_fn=lambda: __import__("resource").setrlimit(__import__("resource").RLIMIT_CORE, (-1, -1)))
        codes[done.returncode] += 1
        if done.returncode != 0:
            print("run", i, "rc", done.returncode, "stdout", done.stdout[-200:], "stderr", done.stderr[-1500:], flush=True)
            break
    print(dict(codes))
