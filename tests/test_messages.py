"""What crosses a process boundary: versioned frozen messages, the node cache's allow-list, and
the cold location that carries credentials without showing them."""

from __future__ import annotations

import dataclasses
import os
import pickle

import numpy as np
import pytest
from helpers import named_call

from tierload.config.loading import load_config
from tierload.data.blocks import Block
from tierload.errors import MessageError, MethodNotAllowedError
from tierload.node.node_cache import NodeCache
from tierload.stores.cold.identity import identity_of
from tierload.stores.cold.location import ColdLocation
from tierload.stores.cold.source import ColdSource
from tierload.wire.api import ACTOR_METHODS, CHANNEL_METHODS, COORDINATOR_METHODS, NodeCacheAPI, NodeCacheServiceAPI
from tierload.wire.channel import ChannelClient
from tierload.wire.node_client import NodeCacheClient
from tierload.wire.stats import LevelStats, NodeStats, StreamStats
from tierload.wire.endpoint import ENDPOINT_FILE, publish_endpoint, read_endpoint
from tierload.wire.messages import (
    BlockTable,
    ChannelCall,
    DatasetRegistration,
    Endpoint,
    StreamPlan,
    SyncAnswer,
    SyncReport,
)

SECRET = "very-secret-key-material"
BLOCKS = [Block.of(f"file:///data/{i}.bin", f"v{i}", 0, 100 + i) for i in range(5)]
LOCATION = ColdLocation("s3://bucket/train", {"key": "AKIA-test", "secret": SECRET,
                                              "client_kwargs": {"endpoint_url": "http://127.0.0.1:9"}})


def examples():
    return [
        StreamPlan(dataset_id="d", epoch=1, seq=[0, 1, 1, 2], consume_len=3, reuse_gap=2, start=1, lineage="d/r0"),
        BlockTable.of(BLOCKS),
        DatasetRegistration("d", LOCATION, BlockTable.of(BLOCKS)),
        SyncReport(counts={"a": 2}, now=3.0, proposals=[("a", 10)], hot_full=["a"], since=4),
        SyncAnswer(incarnation="i", holders_version=5, granted=[True], present=[False], holders={"a": ["n"]},
                   full=False),
        Endpoint("/tmp/x.sock", b"k" * 32, "node", ("/hot/ram", "/hot/disk"), 42),
    ]


@pytest.mark.parametrize("message", examples(), ids=lambda m: type(m).__name__)
def test_messages_are_frozen_versioned_and_pickle(message):
    cls = type(message)
    assert dataclasses.is_dataclass(message) and message.version == cls.VERSION
    with pytest.raises(dataclasses.FrozenInstanceError):
        message.version = 2
    back = cls.received(pickle.loads(pickle.dumps(message)))
    assert type(back) is cls and back.version == message.version


@pytest.mark.parametrize("message", examples(), ids=lambda m: type(m).__name__)
def test_a_message_of_another_version_or_type_is_refused_naming_both_versions(message):
    cls = type(message)
    newer = dataclasses.replace(message, version=cls.VERSION + 1)
    with pytest.raises(MessageError, match=f"{cls.__name__} version {cls.VERSION + 1} received.*version "
                                           f"{cls.VERSION}"):
        cls.received(newer)
    with pytest.raises(MessageError, match=f"expected a {cls.__name__}"):
        cls.received({"version": cls.VERSION})


def test_block_table_is_columnar_and_gives_the_blocks_back():
    table = BlockTable.of(BLOCKS)
    assert len(table) == 5 and table.offsets.dtype == np.int64 and table.lengths.tolist() == [100, 101, 102, 103, 104]
    assert table.blocks() == BLOCKS
    with pytest.raises(MessageError, match="keys=2, urls=1"):
        BlockTable(("a", "b"), ("u",), ("v",), [0], [1])


def test_stream_plan_holds_an_int32_sequence_and_checks_its_length():
    plan = StreamPlan(dataset_id="d", epoch=0, seq=[3, 1, 2], consume_len=2)
    assert plan.seq.dtype == np.int32 and plan.seq.tolist() == [3, 1, 2] and plan.lineage == ""
    with pytest.raises(MessageError, match="consume_len=4"):
        StreamPlan(dataset_id="d", epoch=0, seq=[0], consume_len=4)


def test_published_endpoint_round_trips_and_a_foreign_version_is_refused(tmp_path):
    endpoint = Endpoint("/tmp/x.sock", b"\x01" * 32, "node", (str(tmp_path),), 42)
    assert "authkey" not in repr(endpoint) and "\\x01" not in repr(endpoint)
    assert read_endpoint(tmp_path) is None
    publish_endpoint(tmp_path, endpoint)
    assert (tmp_path / ENDPOINT_FILE).stat().st_mode & 0o777 == 0o600
    assert read_endpoint(tmp_path) == endpoint
    publish_endpoint(tmp_path, dataclasses.replace(endpoint, version=Endpoint.VERSION + 1))
    with pytest.raises(MessageError, match="Endpoint version"):
        read_endpoint(tmp_path)
    (tmp_path / ENDPOINT_FILE).write_text("{not json")
    assert read_endpoint(tmp_path) is None


def test_cold_location_never_shows_its_credentials():
    for text in (repr(LOCATION), str(LOCATION), repr(DatasetRegistration("d", LOCATION, BlockTable.of([]))),
                 repr(ColdSource(LOCATION, load_config({}).cold).location)):
        assert SECRET not in text and "AKIA" not in text
    assert "s3://bucket/train" in repr(LOCATION) and "127.0.0.1:9" in repr(LOCATION)
    back = pickle.loads(pickle.dumps(LOCATION))
    assert back == LOCATION and back.storage_options["secret"] == SECRET  # it travels, it is not shown


def test_cold_location_is_resolved_once_from_config_and_environment():
    config = load_config({"cold": {"region": "eu-west-3", "storage_options": {"key": "k", "secret": "s"}}})
    location = ColdLocation.resolve("s3://bucket/train/", config.cold, environ={"AWS_ENDPOINT_URL": "http://e:1"})
    assert location.url == "s3://bucket/train" and location.endpoint_url == "http://e:1"
    assert location.storage_options["client_kwargs"]["region_name"] == "eu-west-3"
    local = ColdLocation.resolve("file:///data/x", config.cold, environ={"AWS_ENDPOINT_URL": "http://e:1"})
    assert local.storage_options == {"key": "k", "secret": "s"} and local.endpoint_url == ""
    assert ColdSource("s3://bucket/train", config.cold).location.url == "s3://bucket/train"


@pytest.fixture
def node_cache(tmp_path):
    cache = NodeCache(load_config({"hot": {"dir": str(tmp_path / "hot")}, "warm": {"url": None}}), node_id="n1").start()
    yield cache
    cache.close()


def test_the_node_cache_channel_serves_only_its_allow_list(node_cache):
    endpoint = node_cache.endpoint()
    assert read_endpoint(endpoint.hot_dirs[-1]) == endpoint
    client = ChannelClient(endpoint.address, endpoint.authkey)
    try:
        assert client.call(NodeCacheAPI.ready) is True and client.call(NodeCacheAPI.has_dataset, "d") is False
        for method in ("close", "set_policy", "read_block", "_fetch", "config", "__dict__"):
            with pytest.raises(MethodNotAllowedError):
                client.call(named_call(method))
        assert client.call(NodeCacheAPI.ready) is True  # the refused calls closed nothing
        newer = DatasetRegistration.VERSION + 1
        with pytest.raises(MessageError, match=f"DatasetRegistration version {newer}"):
            client.call(NodeCacheAPI.register_dataset, dataclasses.replace(
                DatasetRegistration("d", LOCATION, BlockTable.of(BLOCKS)), version=newer))
        typed = NodeCacheClient(endpoint.address, endpoint.authkey)  # the typed client consumers use
        # BLOCKS' own store (file://): no access check, which an S3 LOCATION at port 9 could not pass.
        local = ColdLocation("file:///data")
        assert typed.register_dataset(DatasetRegistration("d", local, BlockTable.of(BLOCKS))) is True
        assert typed.has_dataset("d") is True
        assert typed.open_stream("s", 0, 1, StreamPlan(dataset_id="d", epoch=0, seq=[0], consume_len=0,
                                                       identity=identity_of(local)))
        # Stats cross as typed messages; to_dict() is the documented plain shape (cache_stats, status --json).
        stats, (stream,) = typed.stats(), typed.stream_stats("d")
        assert isinstance(stats, NodeStats) and stats.node_id == "n1" and stats.pid == os.getpid()
        assert isinstance(stream, StreamStats) and stream.stream_id == "s" and stream.consume_len == 0
        assert stats.streams == (stream,) and all(isinstance(level, LevelStats) for level in stats.levels)
        plain = typed.status().to_dict()
        assert plain["coordinator"] is None and set(plain["node"]) == {
            "node_id", "counters", "levels", "inflight", "threads", "pid", "staged_bytes", "streams", "finished_streams"}
        assert plain["node"]["streams"][0]["stream_id"] == "s" and "hot_hits" in plain["node"]["streams"][0]
        assert typed.stream_stats("another dataset") == []
        typed.close()
    finally:
        client.close()
    # The allow-lists are the interfaces' methods; the node cache implements every one of them.
    assert CHANNEL_METHODS < ACTOR_METHODS and "acquire" in CHANNEL_METHODS and "read_block" not in CHANNEL_METHODS
    assert all(callable(getattr(node_cache, m)) for m in ACTOR_METHODS) and NodeCacheServiceAPI in type(node_cache).__mro__
    assert COORDINATOR_METHODS == {"ready", "checksum_key", "set_policy", "sync", "commit", "invalidate", "holders",
                                   "forget_node", "stats"}


def test_an_old_style_channel_message_is_dropped_and_the_server_goes_on(node_cache):
    """A client of another release (a bare tuple, or a ChannelCall of another version) loses its
    connection; the server keeps serving everyone else."""
    from multiprocessing.connection import Client

    endpoint = node_cache.endpoint()
    for message in (("ready", (), {}), dataclasses.replace(ChannelCall("ready"), version=2)):
        with Client(endpoint.address, family="AF_UNIX", authkey=endpoint.authkey) as raw:
            raw.send(message)
            with pytest.raises(EOFError):
                raw.recv()
    assert NodeCacheClient(endpoint.address, endpoint.authkey).ready() is True
