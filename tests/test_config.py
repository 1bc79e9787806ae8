"""Config parsing, precedence and errors that name the bad value."""

from __future__ import annotations

import pytest
import yaml

from tierload.config.loading import build_config, load_config, packaged_default_yaml
from tierload.config.models import TierloadConfig
from tierload.errors import CapacityParseError, ConfigError
from tierload.units import format_bytes, parse_bytes


@pytest.mark.parametrize("text, expected", [
    ("512MiB", 512 * 2**20), ("2GB", 2 * 10**9), ("2GiB", 2 * 2**30), (1048576, 1048576), ("1024", 1024),
    ("1.5 GiB", int(1.5 * 2**30)), (0, 0),
])
def test_parse_bytes_accepts_units_and_plain_bytes(text, expected):
    assert parse_bytes(text) == expected


@pytest.mark.parametrize("text", ["ten gigs", "-5", "", "12 parsecs", True, 1.5])
def test_parse_bytes_rejects_with_the_value_named(text):
    with pytest.raises(CapacityParseError) as info:
        parse_bytes(text, field="hot.capacity_bytes")
    assert repr(text) in str(info.value) and "hot.capacity_bytes" in str(info.value)
    assert isinstance(info.value, ValueError)


def test_format_bytes():
    assert format_bytes(1536) == "1.5 KiB" and format_bytes(10) == "10 B"


def _key_paths(data, prefix=()) -> set[tuple[str, ...]]:
    paths = set()
    for key, value in data.items():
        paths.add((*prefix, key))
        if isinstance(value, dict):
            paths |= _key_paths(value, (*prefix, key))
    return paths


def test_the_packaged_yaml_states_exactly_the_models_defaults():
    """The models are the one source of defaults; configs/default.yaml is their commented copy."""
    documented = yaml.safe_load(packaged_default_yaml())
    assert build_config(documented) == TierloadConfig()
    assert _key_paths(documented) == _key_paths(TierloadConfig().to_dict())  # every key, none extra
    assert load_config(environ={}) == TierloadConfig()


def test_every_bad_value_is_reported_at_once_with_its_key():
    with pytest.raises(ConfigError) as info:
        load_config({"hot": {"capacity_bytes": "ten gigs"}, "policy": {"hot": {"eviction": "fifo"}},
                     "prefetch": {"depth_blocks": -1}, "colld": {}})
    text = str(info.value)
    assert "hot.capacity_bytes" in text and "'ten gigs'" in text
    assert "unknown policy 'fifo'" in text and "clairvoyant" in text
    assert "prefetch.depth_blocks" in text
    assert "unknown key 'colld'" in text


def test_clairvoyant_is_refused_for_the_warm_tier():
    with pytest.raises(ConfigError, match="policy.warm.eviction"):
        load_config({"policy": {"warm": {"eviction": "clairvoyant"}}})


def test_precedence_explicit_over_env_over_yaml_over_default(tmp_path):
    yaml_file = tmp_path / "policy.yaml"
    yaml_file.write_text("hot:\n  capacity_bytes: 1GiB\nprefetch:\n  depth_blocks: 10\n  concurrency: 3\n")
    env = {"TIERLOAD_PREFETCH__DEPTH_BLOCKS": "20", "TIERLOAD_PREFETCH__CONCURRENCY": "4"}
    defaults = TierloadConfig()
    # Every layer's value differs from the layers below it, so each assertion can fail.
    assert defaults.hot.capacity_bytes != 2**30 and defaults.prefetch.depth_blocks not in (10, 20)
    assert defaults.prefetch.concurrency not in (3, 4, 5)
    config = load_config(yaml_file, overrides={"prefetch": {"concurrency": 5}}, environ=env)
    assert config.hot.capacity_bytes == 2**30            # YAML over default
    assert config.prefetch.depth_blocks == 20            # env over YAML, parsed to int
    assert config.prefetch.concurrency == 5              # explicit over env
    assert config.prefetch.depth_bytes == 256 * 2**20    # default


def test_environment_values_are_parsed_to_the_field_type():
    config = load_config(environ={"TIERLOAD_HOT__CAPACITY_BYTES": "4GiB", "TIERLOAD_WARM__COMPRESS": "true",
                                  "TIERLOAD_WARM__URL": "null"})
    assert config.hot.capacity_bytes == 4 * 2**30
    assert config.warm.compress is True
    assert config.warm.url is None


def test_missing_or_malformed_yaml_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "nope.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("hot: [unclosed\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(bad)


def test_a_bad_value_from_the_environment_names_its_variable(tmp_path):
    with pytest.raises(ConfigError, match=r"hot\.capacity_bytes: 'lots' .*TIERLOAD_HOT__CAPACITY_BYTES") as caught:
        load_config(environ={"TIERLOAD_HOT__CAPACITY_BYTES": "lots"})
    assert "TIERLOAD_PREFETCH__CONCURRENCY" not in str(caught.value)
    # A bad value from a file is not blamed on a variable that set another key.
    config_file = tmp_path / "c.yaml"
    config_file.write_text("hot:\n  capacity_bytes: lots\n")
    with pytest.raises(ConfigError) as from_file:
        load_config(config_file, environ={"TIERLOAD_PREFETCH__CONCURRENCY": "5"})
    assert "hot.capacity_bytes: 'lots'" in str(from_file.value) and "TIERLOAD_" not in str(from_file.value)
    # An explicit argument wins over the variable, so the variable is not named for its value.
    with pytest.raises(ConfigError) as explicit:
        load_config(overrides={"hot": {"capacity_bytes": "lots"}}, environ={"TIERLOAD_HOT__CAPACITY_BYTES": "1GiB"})
    assert "TIERLOAD_HOT__CAPACITY_BYTES" not in str(explicit.value)
