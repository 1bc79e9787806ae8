"""Per test: the node cache actors it started that did not exist yet (pytest -p depcount, PYTHONPATH=this folder)."""
import os, collections
COUNT = collections.Counter(); CUR = {"id": "?"}
def pytest_runtest_setup(item): CUR["id"] = item.nodeid
def pytest_configure(config):
    import tierload.deploy.actors as actors
    orig = actors.get_node_cache
    def wrapped(config, node_id=None, *, with_coordinator=True):
        import ray
        node = node_id or ray.get_runtime_context().get_node_id()
        try:
            ray.get_actor(actors.node_cache_name(config, node), namespace=config.ray.namespace); new = False
        except ValueError:
            new = True
        if new: COUNT[CUR["id"]] += 1
        return orig(config, node_id, with_coordinator=with_coordinator)
    import tierload.deploy.runtime as runtime, tierload.deploy.service as service
    actors.get_node_cache = runtime.get_node_cache = service.get_node_cache = wrapped
def pytest_sessionfinish(session):
    with open(f"/tmp/cnt/dep-{os.getpid()}.txt", "w") as f:
        for k, v in sorted(COUNT.items()): f.write(f"{v} {k}\n")
