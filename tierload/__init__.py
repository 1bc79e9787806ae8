"""tierload: feed deep-learning training from S3 through warm and hot tiers managed by Ray actors.

The public API::

    from tierload import TieredDataset, load_config
    dataset = TieredDataset("s3://bucket/train", load_config("configs/default.yaml"), batch_size=64)
"""

from tierload.config import TierloadConfig, load_config
from tierload.dataset import TieredDataset
from tierload.errors import (BackendError, BucketNotFoundError, CapacityError, ConfigError, EndpointUnreachableError,
                             IntegrityError, ManifestError, ServiceError, SourceChangedError, SourceNotFoundError,
                             TierloadError, TransientBackendError)

__version__ = "0.1.0"

__all__ = [
    "BackendError",
    "BucketNotFoundError",
    "CapacityError",
    "ConfigError",
    "EndpointUnreachableError",
    "IntegrityError",
    "ManifestError",
    "ServiceError",
    "SourceChangedError",
    "SourceNotFoundError",
    "TieredDataset",
    "TierloadConfig",
    "TierloadError",
    "TransientBackendError",
    "load_config",
]
