"""The AWS credential chain as the process that read the config sees it, re-applied in every reader.

Ray actors (the node cache) were started with the environment Ray had, not the training
process's: an ``AWS_PROFILE`` or ``AWS_SHARED_CREDENTIALS_FILE`` exported only in the training
process never reaches them. So the chain's *settings* are captured once, where the config is
read (:func:`capture`), shipped with the dataset's
:class:`~tierload.stores.cold.source.ColdLocation`, and each process builds its own botocore session
from them (:func:`session_for`). What is shipped are settings, not resolved keys, so refreshable
sources stay refreshable in every process: an assume-role profile, ``credential_process``,
SSO and the instance role each refresh themselves there.

Captured (when set in the capturing process's environment):

* ``AWS_ACCESS_KEY_ID`` / ``AWS_SECRET_ACCESS_KEY`` / ``AWS_SESSION_TOKEN``: static keys,
  shipped as s3fs's ``key``/``secret``/``token`` (unless the options name keys or a profile
  already), which is where botocore's chain puts them: first.
* The botocore session variables that choose and configure the chain's other sources
  (:data:`CHAIN_VARIABLES`: profile, config and credentials files, instance-metadata
  settings), with the environment variable names botocore itself reads for them. Each is set in
  a reader's session as that variable's value, so botocore's own precedence applies unchanged.

Not shipped: sources botocore reads straight from ``os.environ`` (web identity's
``AWS_ROLE_ARN`` / ``AWS_WEB_IDENTITY_TOKEN_FILE``, container credentials'
``AWS_CONTAINER_CREDENTIALS_*``); the platforms that set them (EKS, ECS) set them for every
process of the pod or task. Files named by a setting must exist at that path on every node.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

__all__ = ["CHAIN_VARIABLES", "botocore_session_for", "capture", "session_for"]

# botocore session variables that decide which credentials a session finds and how it asks the
# instance role. Others (region, endpoints, retries) are resolved by tierload itself.
CHAIN_VARIABLES = ("profile", "config_file", "credentials_file", "metadata_service_timeout",
                   "metadata_service_num_attempts", "ec2_metadata_service_endpoint",
                   "ec2_metadata_service_endpoint_mode", "ec2_metadata_v1_disabled", "imds_use_ipv6",
                   "sts_regional_endpoints")

_STATIC_KEYS = (("key", "AWS_ACCESS_KEY_ID"), ("secret", "AWS_SECRET_ACCESS_KEY"), ("token", "AWS_SESSION_TOKEN"))


def _environment_names(variable: str) -> list[str]:
    """The environment variables botocore reads for session ``variable``, in its order."""
    from botocore.configprovider import BOTOCORE_DEFAUT_SESSION_VARIABLES

    names = BOTOCORE_DEFAUT_SESSION_VARIABLES[variable][1]
    return list(names) if isinstance(names, (list, tuple)) else [names] if names else []


def capture(options: dict[str, Any], environ: Mapping[str, str] | None = None) -> tuple[tuple[str, str], ...]:
    """Capture the chain's settings from ``environ``; static keys go into ``options`` in place.

    Args:
        options: s3fs options being resolved. Env keys are added as ``key``/``secret``/``token``
            unless it names keys or a ``profile`` (s3fs's option; botocore then skips env keys).
        environ: The environment to read (default ``os.environ``).

    Returns:
        ``((session variable, value), ...)`` for :func:`session_for`; empty when nothing is set,
        so a reader then uses botocore's defaults as before.
    """
    env = os.environ if environ is None else environ
    settings: dict[str, str] = {}
    for variable in CHAIN_VARIABLES:
        value = next((env[name] for name in _environment_names(variable) if env.get(name)), None)
        if value is not None:
            settings[variable] = value
    named = options.get("key") or options.get("secret") or options.get("profile")
    if not named and env.get("AWS_ACCESS_KEY_ID") and env.get("AWS_SECRET_ACCESS_KEY"):
        options.update({option: env[name] for option, name in _STATIC_KEYS if env.get(name)})
    return tuple(sorted(settings.items()))


def session_for(settings: tuple[tuple[str, str], ...], profile: str | None = None) -> Any:
    """A new aiobotocore session whose chain uses ``settings`` (from :func:`capture`).

    Each setting replaces that variable's lookup in the session's config store (where botocore
    would read the environment), not an explicit session argument: an explicit profile makes
    botocore skip environment keys, which the capturing process did not.

    Args:
        settings: From :func:`capture`.
        profile: s3fs's explicit ``profile`` option, if any (explicit, as s3fs would pass it).

    Returns:
        ``aiobotocore.session.AioSession``, for s3fs's ``session=`` option.
    """
    import aiobotocore.session

    return _with_settings(aiobotocore.session.AioSession(profile=profile), settings)


def botocore_session_for(settings: tuple[tuple[str, str], ...], profile: str | None = None) -> Any:
    """A new (synchronous) botocore session whose chain uses ``settings``, as :func:`session_for`.

    For clients that take credentials rather than a session (obstore's S3 credential provider,
    :mod:`tierload.stores.cold.s3_obstore_config`).

    Returns:
        ``botocore.session.Session``.
    """
    import botocore.session

    return _with_settings(botocore.session.Session(profile=profile), settings)


def _with_settings(session: Any, settings: tuple[tuple[str, str], ...]) -> Any:
    from botocore.configprovider import ConstantProvider

    store = session.get_component("config_store")
    for variable, value in settings:
        store.set_config_provider(variable, ConstantProvider(value))
    return session
