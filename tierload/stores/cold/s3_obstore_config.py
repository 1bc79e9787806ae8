"""The S3 options tierload resolved for s3fs (:func:`~tierload.stores.cold.location.s3_storage_options`),
as obstore's ``S3Store`` takes them, and which options it cannot carry.

obstore reads S3's range GETs (``cold.s3_engine: obstore``, the default); the options were
resolved once, for s3fs, in the process that read the configuration, and listings still go
through s3fs. What crosses over:

============================================  =========================================
s3fs option                                   obstore ``S3Config`` / argument
============================================  =========================================
``client_kwargs.endpoint_url``                ``endpoint`` (path-style off AWS)
``client_kwargs.region_name``                 ``region`` (else the chain's, else us-east-1)
``key`` / ``secret`` / ``token``              ``access_key_id`` / ``secret_access_key`` / ``token``
``anon``                                      ``skip_signature``
``requester_pays``                            ``request_payer``
``s3_additional_kwargs.RequestPayer``         ``request_payer``
``profile`` and the captured chain            ``credential_provider`` over botocore's chain
============================================  =========================================

Anything else that changes a GET (other ``s3_additional_kwargs`` such as SSE-C keys or
``ExpectedBucketOwner``, other ``client_kwargs`` or ``config_kwargs`` such as a proxy, a
custom CA bundle or another signature version) is named by :func:`aiobotocore_reason`, and that
source's GETs go through s3fs's aiobotocore client instead: slower, never wrong.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tierload.stores.cold import aws_chain

if TYPE_CHECKING:
    from obstore.store import S3Credential

    from tierload.stores.cold.source import ColdSource

# What obstore reproduces of s3fs's client options (the rest changes a GET in a way it cannot).
_CARRIED_CLIENT_KWARGS = {"endpoint_url", "region_name", "use_ssl"}
_CARRIED_CONFIG_KWARGS = {"connect_timeout", "read_timeout", "retries", "max_pool_connections", "s3",
                          "user_agent", "user_agent_extra"}
_CARRIED_S3_CONFIG = {"addressing_style"}
_CARRIED_ADDITIONAL = {"RequestPayer"}
_CARRIED_SIGNATURES = {None, "s3v4", "v4"}


def aiobotocore_reason(options: dict[str, Any]) -> str | None:
    """Why obstore cannot send ``options``' GETs as s3fs would (None: it can).

    Args:
        options: Resolved s3fs ``storage_options`` (``ColdSource.storage_options``).
    """
    extra = set(options.get("s3_additional_kwargs") or {}) - _CARRIED_ADDITIONAL
    if extra:
        return f"s3_additional_kwargs {sorted(extra)}"
    extra = set(options.get("client_kwargs") or {}) - _CARRIED_CLIENT_KWARGS
    if extra:
        return f"client_kwargs {sorted(extra)}"
    config_kwargs = options.get("config_kwargs") or {}
    extra = set(config_kwargs) - _CARRIED_CONFIG_KWARGS - {"signature_version"}
    extra |= set(config_kwargs.get("s3") or {}) - _CARRIED_S3_CONFIG
    if extra:
        return f"config_kwargs {sorted(extra)}"
    if config_kwargs.get("signature_version") not in _CARRIED_SIGNATURES:
        return f"signature_version {config_kwargs['signature_version']!r}"
    if options.get("session") is not None:
        return "a botocore session given in storage_options"
    return None


class BotocoreCredentials:
    """obstore's S3 ``credential_provider`` over botocore's credential chain, as s3fs would find it.

    The chain's settings captured where the configuration was read
    (:func:`tierload.stores.cold.aws_chain.capture`) and s3fs's ``profile`` choose the sources,
    so a profile, ``credential_process``, SSO, an assume-role profile or the instance role work
    in every process as they do for s3fs. Refreshable credentials are handed out as valid for
    :attr:`HANDED_OUT_S` seconds: object_store asks again once fewer than 300 s of that are left
    (its token cache's ``min_ttl``), so every ~5 minutes, and botocore refreshes them whenever
    fewer than 15 minutes of their real validity are left (its advisory window), so a key in use
    always has more than 10 minutes left.

    Args:
        settings: From :func:`~tierload.stores.cold.aws_chain.capture`.
        profile: s3fs's ``profile`` option, if any.

    Raises:
        botocore.exceptions.NoCredentialsError: (when called) botocore's chain finds none; the
            cold tier's error translation names the fix (:mod:`tierload.stores.cold.errors`).
    """

    HANDED_OUT_S = 600.0

    def __init__(self, settings: tuple[tuple[str, str], ...], profile: str | None) -> None:
        self._session = aws_chain.botocore_session_for(settings, profile)
        self._credentials: Any = None

    @property
    def region(self) -> str | None:
        """The region the chain configures (``AWS_REGION``, the profile's ``region``), if any."""
        return self._session.get_config_variable("region")

    def __call__(self) -> S3Credential:
        from datetime import UTC, datetime, timedelta

        from botocore.credentials import RefreshableCredentials
        from botocore.exceptions import NoCredentialsError

        if self._credentials is None:
            self._credentials = self._session.get_credentials()
            if self._credentials is None:
                raise NoCredentialsError()
        frozen = self._credentials.get_frozen_credentials()
        refreshable = isinstance(self._credentials, RefreshableCredentials)
        return {"access_key_id": frozen.access_key, "secret_access_key": frozen.secret_key, "token": frozen.token,
                "expires_at": datetime.now(UTC) + timedelta(seconds=self.HANDED_OUT_S) if refreshable else None}


def obstore_s3_config(source: ColdSource, options: dict[str, Any]) -> tuple[Any, str, BotocoreCredentials | None]:
    """``(S3Config, endpoint, credential provider or None)`` for obstore's ``S3Store`` from ``options``.

    Static keys (the options' or the job's ``cold.credential_provider``'s) are passed as they
    are; otherwise, unless the bucket is read anonymously, a :class:`BotocoreCredentials`, asked
    once here so that a chain without credentials fails where the store is made.

    Raises:
        botocore.exceptions.NoCredentialsError: No keys, not anonymous, and botocore's chain finds none.
    """
    client_kwargs = options.get("client_kwargs") or {}
    credentials = {**{name: options[name] for name in ("key", "secret", "token") if options.get(name)},
                   **source.provided_credentials()}
    endpoint = str(client_kwargs.get("endpoint_url") or "")
    s3_config: dict[str, Any] = {}
    if endpoint:
        s3_config["endpoint"] = endpoint
    if options.get("requester_pays") or (options.get("s3_additional_kwargs") or {}).get("RequestPayer"):
        s3_config["request_payer"] = True
    addressing = ((options.get("config_kwargs") or {}).get("s3") or {}).get("addressing_style")
    if addressing == "virtual" or (endpoint and "amazonaws.com" in endpoint and addressing != "path"):
        s3_config["virtual_hosted_style_request"] = True
    elif endpoint or addressing == "path":
        s3_config["virtual_hosted_style_request"] = False  # a local endpoint (moto, MinIO) is path-style
    provider = None
    region = client_kwargs.get("region_name")
    if options.get("anon"):
        s3_config["skip_signature"] = True
    elif credentials.get("key"):
        s3_config["access_key_id"] = credentials["key"]
        s3_config["secret_access_key"] = credentials.get("secret", "")
        if credentials.get("token"):
            s3_config["token"] = credentials["token"]
    else:
        provider = BotocoreCredentials(source.location.credential_chain, options.get("profile"))
        provider()
        region = region or provider.region
    s3_config["region"] = region or "us-east-1"
    return s3_config, endpoint, provider
