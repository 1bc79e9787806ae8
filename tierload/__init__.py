"""tierload: feed deep-learning training from S3 through warm and hot tiers managed by Ray actors.

The public API::

    from tierload import Source, TieredDataset, load_config
    dataset = TieredDataset("s3://bucket/train", load_config("configs/default.yaml"), batch_size=64)
    mixture = TieredDataset([Source("s3://bucket/web", weight=0.7), Source("s3://bucket/code", weight=0.3)])
"""

from tierload.config.loading import load_config
from tierload.config.models import TierloadConfig
from tierload.errors import (
    AccessDeniedError,
    BackendError,
    BucketNotFoundError,
    CapacityError,
    ConfigError,
    EndpointUnreachableError,
    IntegrityError,
    ManifestError,
    ServiceError,
    SourceChangedError,
    SourceNotFoundError,
    TierloadError,
    TransientBackendError,
)

__version__ = "0.1.0"

# torch is imported only when the dataset is used: actors and the CLI start without it.
_LAZY = {
    "Source": "tierload.loader.mixture_sources",
    "TieredDataset": "tierload.loader.dataset",
    "collate": "tierload.loader.collation",
    "watch": "tierload.loader.stall",
}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'tierload' has no attribute {name!r}")

__all__ = [
    "AccessDeniedError",
    "BackendError",
    "BucketNotFoundError",
    "CapacityError",
    "ConfigError",
    "EndpointUnreachableError",
    "IntegrityError",
    "ManifestError",
    "ServiceError",
    "Source",
    "SourceChangedError",
    "SourceNotFoundError",
    "TieredDataset",
    "TierloadConfig",
    "TierloadError",
    "TransientBackendError",
    "collate",
    "load_config",
    "watch",
]
