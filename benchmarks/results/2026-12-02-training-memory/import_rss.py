"""RSS (MB) after `import torch`, then after each module named on the command line, in order: what each import adds.

``python import_rss.py MODULE...``
"""
import sys, importlib
def rss():
    for l in open('/proc/self/status'):
        if l.startswith('VmRSS'): return int(l.split()[1])/1024
import torch
base=rss(); print(f"torch {base:.0f} MB")
last=base
for m in sys.argv[1:]:
    importlib.import_module(m); now=rss(); print(f"+{now-last:5.1f} MB  {m}"); last=now
print(f"total above torch {last-base:.1f} MB")
