import os, time, json
import pytest

_CG = None

def pytest_configure(config):
    global _CG
    w = os.environ.get('PYTEST_XDIST_WORKER')
    if not w:
        return
    _CG = f'/sys/fs/cgroup/cpuacct/tl_{w}'
    os.makedirs(_CG, exist_ok=True)
    with open(_CG + '/cgroup.procs', 'w') as f:
        f.write(str(os.getpid()))

def _usage():
    if not _CG:
        return 0
    with open(_CG + '/cpuacct.usage') as f:
        return int(f.read()) / 1e9

@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    start = time.time(); c0 = _usage()
    yield
    end = time.time(); c1 = _usage()
    w = os.environ.get('PYTEST_XDIST_WORKER', 'main')
    with open('/tmp/tl/cg.jsonl', 'a') as f:
        f.write(json.dumps({'w': w, 'id': item.nodeid, 's': start, 'e': end, 'cpu': c1 - c0}) + '\n')
