"""Timestamps of each test start and end (pytest -p ttime, TTIME=file, PYTHONPATH=this folder)."""
import time, os
def pytest_runtest_logstart(nodeid, location):
    with open(os.environ["TTIME"], "a") as f: f.write(f"{time.time():.2f} start {nodeid}\n")
def pytest_runtest_logfinish(nodeid, location):
    with open(os.environ["TTIME"], "a") as f: f.write(f"{time.time():.2f} end {nodeid}\n")
