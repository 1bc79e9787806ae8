"""Errors cross process boundaries as their own class with their context.

Every class of the tree round-trips through pickle (the classes are found by walking the tree,
so a new one is covered without touching this file), the local channel hands a node cache's
error back by type, and a stream the node cache forgot while the training loop paused is
reopened, end to end.
"""

from __future__ import annotations

import os
import pickle
import shutil
import tempfile
import time
from collections import Counter
from typing import Protocol

import pytest
from helpers import index_of, named_call, put_indexed_objects

from tierload import errors
from tierload.frames import codec
from tierload.wire.channel import ChannelClient, ChannelServer


class _ServedAPI(Protocol):
    def forgotten(self) -> None: ...

    def buggy(self) -> None: ...

    def echo(self, value: object) -> object: ...


def _tree(root: type) -> list[type]:
    found = [root]
    for child in root.__subclasses__():
        found.extend(cls for cls in _tree(child) if cls not in found)
    return found


ERROR_CLASSES = [cls for cls in _tree(errors.TierloadError) if cls.__module__ == errors.__name__]


def test_the_tree_holds_every_error_of_the_errors_module():
    declared = {obj for obj in vars(errors).values() if isinstance(obj, type) and issubclass(obj, Exception)}
    assert declared == set(ERROR_CLASSES)
    assert {errors.DecodeError, errors.CodecError} <= set(ERROR_CLASSES)
    for cls in ERROR_CLASSES:
        assert cls.__name__ in (errors.__doc__ or ""), f"{cls.__name__} is missing from the drawn tree"


@pytest.mark.parametrize("cls", ERROR_CLASSES, ids=lambda cls: cls.__name__)
def test_every_error_round_trips_through_pickle_with_its_context(cls):
    error = cls("it broke", tier="hot", key="blk-1", url="s3://bucket/x", where="node cache on node n1")
    error.remote_traceback = "Traceback (most recent call last):\n  File \"x.py\", line 1\nValueError: inner\n"
    back = pickle.loads(pickle.dumps(error))
    assert type(back) is cls
    assert (back.message, back.tier, back.key, back.url, back.where, back.remote_traceback) == (
        "it broke", "hot", "blk-1", "s3://bucket/x", "node cache on node n1", error.remote_traceback)
    assert str(back) == str(error) and back.args == error.args


def test_decode_and_codec_errors_are_still_value_errors():
    with pytest.raises(errors.CodecError) as info:
        codec.zstd_decompress(b"not a zstd frame", 16)
    assert isinstance(info.value, ValueError) and "does not decode" in str(info.value)
    with pytest.raises(ValueError):
        codec.zstd_content_size(b"abc")
    assert issubclass(errors.DecodeError, ValueError)


class _Target:
    def forgotten(self):
        raise errors.StreamNotOpenError("stream s1 is not open on this node cache")

    def buggy(self):
        return {}["missing"]

    def echo(self, value):
        return value

    def not_served(self):
        return "should never run"


@pytest.fixture
def channel():
    own = tempfile.mkdtemp(prefix="tl-errors-")  # a directory of its own, short enough for a socket path
    address = os.path.join(own, "chan.sock")
    server = ChannelServer(_Target(), address, b"k" * 32, where="test server", interface=_ServedAPI)
    client = ChannelClient(address, b"k" * 32)
    yield client
    client.close()
    server.close()
    shutil.rmtree(own, ignore_errors=True)


def test_the_channel_hands_errors_back_by_type_with_their_remote_traceback(channel):
    with pytest.raises(errors.StreamNotOpenError) as info:
        channel.call(_ServedAPI.forgotten)
    assert "in forgotten" in info.value.remote_traceback
    with pytest.raises(errors.ServiceError) as wrapped:
        channel.call(_ServedAPI.buggy)
    assert type(wrapped.value) is errors.ServiceError and "KeyError" in str(wrapped.value)
    assert wrapped.value.where == "test server" and "in buggy" in wrapped.value.remote_traceback
    assert channel.call(_ServedAPI.echo, 7) == 7


@pytest.mark.parametrize("method", ["not_served", "_private", "__init__"])
def test_the_channel_serves_only_its_allow_list(channel, method):
    with pytest.raises(errors.MethodNotAllowedError, match=repr(method)):
        channel.call(named_call(method))
    assert channel.call(_ServedAPI.echo, "still serving") == "still serving"


def test_a_stream_that_expired_while_the_loop_paused_is_reopened(bucket, tier_config, make_dataset):
    """The node cache closes a stream nobody touched for ``stream_idle_timeout_s``; the next miss
    gets StreamNotOpenError over the channel and the reader reopens the stream: the epoch goes on
    with every sample exactly once."""
    name, fs = bucket
    put_indexed_objects(fs, f"{name}/ds", 40)
    # A shallow prefetch window leaves most blocks unfetched when the loop pauses, so the loop
    # has to ask the node cache again afterwards.
    config = tier_config(warm=None, prefetch={"depth_blocks": 2, "stream_idle_timeout_s": 1.5})
    dataset = make_dataset(f"s3://{name}/ds", config, layout="files", shuffle=False)
    samples = iter(dataset)
    seen = [index_of(next(samples)[0]) for _ in range(10)]
    stream_count = len(dataset.cache_stats()["streams"])
    # Past the idle timeout the cache closes the stream: watched for up to the 4 s this test
    # always allowed, instead of sleeping all of them.
    deadline = time.monotonic() + 4.0
    while len(dataset.cache_stats()["streams"]) == stream_count and time.monotonic() < deadline:
        time.sleep(0.1)
    assert len(dataset.cache_stats()["streams"]) == stream_count - 1
    seen.extend(index_of(sample) for sample, _label in samples)
    assert Counter(seen) == Counter(range(40))
    # At least once: on a loaded host a slow fetch can outlast the short timeout once more.
    assert dataset.consumer_stats["reopened_streams"] >= 1
