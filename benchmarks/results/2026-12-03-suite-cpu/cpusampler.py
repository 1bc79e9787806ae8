"""Sample /proc every 0.5 s: per pid the last seen utime+stime (s) and its command class."""
import os, sys, time, json, re
out = sys.argv[1]; stop = sys.argv[2]
HZ = os.sysconf("SC_CLK_TCK")
seen = {}
initial=set()
for pid in os.listdir('/proc'):
    if pid.isdigit():
        try: initial.add((pid, open(f'/proc/{pid}/stat').read().rsplit(')',1)[1].split()[19]))
        except OSError: pass
def classify(cmd, comm):
    c = cmd
    if "pytest" in c and "xdist" not in c and "-c" not in c: return "pytest"
    if c.startswith("ray::"): return c.split()[0].split("(")[0][:40]
    for key in ("gcs_server", "raylet", "dashboard/agent.py", "runtime_env/agent", "log_monitor", "dashboard.py", "monitor.py", "default_worker.py", "moto", "s3local", "node ", "azurite", "fake-gcs", "torchrun", "scenario.py", "ray_train.py", "tierload_tools", "tierload ", "setup_worker", "-c"):
        if key in c: return key.strip()
    return (comm or c[:30])
while not os.path.exists(stop):
    for pid in os.listdir("/proc"):
        if not pid.isdigit(): continue
        try:
            with open(f"/proc/{pid}/stat") as f: st = f.read()
            with open(f"/proc/{pid}/cmdline", "rb") as f: cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError: continue
        r = st.rfind(")"); comm = st[st.find("(")+1:r]; fields = st[r+2:].split()
        cpu = (int(fields[11]) + int(fields[12])) / HZ
        starttime = fields[19]
        key = (pid, starttime)
        prev = seen.get(key)
        if key in initial: continue
        if prev is None or cpu >= prev[0]:
            seen[key] = (cpu, classify(cmd, comm) if cmd else (prev[1] if prev else comm))
    time.sleep(0.5)
agg = {}
for (pid, s), (cpu, cls) in seen.items():
    a = agg.setdefault(cls, [0.0, 0]); a[0] += cpu; a[1] += 1
json.dump(sorted(([k, round(v[0], 1), v[1]] for k, v in agg.items()), key=lambda x: -x[1]), open(out, "w"), indent=0)
