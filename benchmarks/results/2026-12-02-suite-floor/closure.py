import subprocess, json, sys
mods = sys.argv[1:]
out = {}
for m in mods + ["tierload.loader.dataset", "tierload", "tierload.cli.main", "tierload.node.node_cache"]:
    r = subprocess.run([".venv/bin/python", "-c", f"import sys, json, {m}; print(json.dumps(sorted(sys.modules)))"], capture_output=True, text=True)
    out[m] = json.loads(r.stdout)
json.dump(out, open("/tmp/hoist/closure-%s.json" % ("after" if "after" in sys.argv[0] else "x"), "w"))
print(json.dumps({k: len(v) for k, v in out.items()}))
