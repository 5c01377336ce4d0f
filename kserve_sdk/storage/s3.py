"""``s3://bucket/prefix`` with boto3 (``pip install kserve-sdk[s3]``).

Settings, as KServe's storage initializer reads them (a ``"type": "s3"`` STORAGE_CONFIG entry sets the first
seven, and wins over the environment): ``AWS_ENDPOINT_URL``, ``AWS_ACCESS_KEY_ID`` / ``AWS_SECRET_ACCESS_KEY``
(or any boto3 credential source, ``AWS_SESSION_TOKEN`` included), ``AWS_DEFAULT_REGION`` (or ``AWS_REGION``),
``AWS_CA_BUNDLE``, ``S3_VERIFY_SSL=0``, ``awsAnonymousCredential=true`` (unsigned requests to a public bucket);
``S3_ENDPOINT`` (host[:port]; ``S3_USE_HTTPS=0`` for http) when AWS_ENDPOINT_URL is not set;
``S3_USER_VIRTUAL_BUCKET=true`` (virtual-hosted addressing), ``S3_USE_ACCELERATE=true`` (transfer acceleration),
``S3_CONNECT_TIMEOUT`` (default 10 s), ``S3_READ_TIMEOUT`` (default KSERVE_SDK_STORAGE_TIMEOUT, 60 s),
``S3_MAX_ATTEMPTS`` (passed as KServe passes it, botocore's ``retries={"max_attempts": N}``: N retries after the
first request, default 3, standard mode; when unset, boto3's ``AWS_MAX_ATTEMPTS`` / ``AWS_RETRY_MODE`` if set),
``S3_MAX_FILE_CONCURRENCY`` (objects at once; default KSERVE_SDK_STORAGE_CONCURRENCY, 8), and KServe's
cluster-wide CA bundle (``CA_BUNDLE_CONFIGMAP_NAME`` / ``CA_BUNDLE_VOLUME_MOUNT_POINT``) when AWS_CA_BUNDLE is not
set. botocore itself also reads ``REQUESTS_CA_BUNDLE``.
"""
import os
from typing import Any, Dict, List, Optional, Tuple

from ..utils.utils import strtobool
from . import settings
from .common import (
    Patterns,
    StorageError,
    bucket_and_prefix,
    concurrency,
    download_all,
    env_float,
    env_int,
    objects_below,
    require,
)

LEGACY_GLOBAL_ENDPOINT = "https://s3.amazonaws.com"


def _flag(name: str, default: bool) -> bool:
    value = settings.get(name)
    if value is None or value == "":
        return default
    try:
        return strtobool(value)
    except ValueError:
        return default


def endpoint_url() -> Optional[str]:
    endpoint = settings.get("AWS_ENDPOINT_URL") or os.environ.get("S3_ENDPOINT")
    if endpoint and "://" not in endpoint:
        endpoint = ("https://" if _flag("S3_USE_HTTPS", True) else "http://") + endpoint
    return endpoint or None


def _region() -> Optional[str]:
    return settings.get("AWS_DEFAULT_REGION") or os.environ.get("AWS_REGION") or None


def config_options() -> Dict[str, Any]:
    """botocore ``Config`` options from the environment (KServe's S3 tunables)."""
    options: Dict[str, Any] = {
        "connect_timeout": env_float("S3_CONNECT_TIMEOUT", 10.0),
        "read_timeout": env_float("S3_READ_TIMEOUT", env_float("KSERVE_SDK_STORAGE_TIMEOUT", 60.0)),
        "max_pool_connections": max(10, concurrency("S3_MAX_FILE_CONCURRENCY"))}
    if os.environ.get("S3_MAX_ATTEMPTS"):
        options["retries"] = {"max_attempts": max(0, env_int("S3_MAX_ATTEMPTS", 3)), "mode": "standard"}
    elif not os.environ.get("AWS_MAX_ATTEMPTS") and not os.environ.get("AWS_RETRY_MODE"):
        options["retries"] = {"max_attempts": 3, "mode": "standard"}
    if _flag("awsAnonymousCredential", False):
        from botocore import UNSIGNED
        options["signature_version"] = UNSIGNED
    s3_options: Dict[str, Any] = {}
    legacy = endpoint_url() == LEGACY_GLOBAL_ENDPOINT and _region() not in (None, "us-east-1")
    if _flag("S3_USER_VIRTUAL_BUCKET", False) or legacy:  # KServe: the global endpoint outside us-east-1
        s3_options["addressing_style"] = "virtual"
    if _flag("S3_USE_ACCELERATE", False):
        s3_options["use_accelerate_endpoint"] = True
    if s3_options:
        options["s3"] = s3_options
    return options


def verify() -> Optional[Any]:
    """boto3's ``verify``: False (S3_VERIFY_SSL=0), a CA bundle (AWS_CA_BUNDLE, else KServe's cluster-wide
    one, which must then exist), or None for botocore's own choice."""
    if not _flag("S3_VERIFY_SSL", True):
        return False
    bundle = settings.get("AWS_CA_BUNDLE") or settings.cluster_ca_file()
    if bundle and not os.path.exists(bundle):
        raise StorageError(f"the CA bundle {bundle} does not exist (AWS_CA_BUNDLE or CA_BUNDLE_VOLUME_MOUNT_POINT)")
    return bundle or None


def client():
    boto3 = require("boto3", "s3", "boto3")
    from botocore.config import Config

    kwargs: Dict[str, Any] = {"endpoint_url": endpoint_url(), "config": Config(**config_options())}
    if _region():
        kwargs["region_name"] = _region()
    checked = verify()
    if checked is not None:
        kwargs["verify"] = checked
    from_config = settings.s3_config()  # STORAGE_CONFIG's keys: read here, not written into the environment
    if "AWS_ACCESS_KEY_ID" in from_config and "AWS_SECRET_ACCESS_KEY" in from_config:
        kwargs["aws_access_key_id"] = from_config["AWS_ACCESS_KEY_ID"]
        kwargs["aws_secret_access_key"] = from_config["AWS_SECRET_ACCESS_KEY"]
    return boto3.session.Session().client("s3", **kwargs)


def describe(error: Exception) -> str:
    response = getattr(error, "response", None)
    if isinstance(response, dict) and "Error" in response:
        code = response["Error"].get("Code") or response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        message = response["Error"].get("Message") or ""
        if str(code) == "403" and not message:
            code, message = "AccessDenied", "Forbidden"
        if str(code) == "404" and not message:
            code, message = "NoSuchKey", "Not Found"
        return f"{code}: {message}" if message else str(code)
    return f"{type(error).__name__}: {error}"


def download(uri: str, dest: str, allow_patterns: Patterns = None, ignore_patterns: Patterns = None) -> None:
    bucket, prefix = bucket_and_prefix(uri, "s3://bucket/prefix")
    s3 = client()
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        listing: List[Tuple[str, int]] = []
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
            listing.extend((o["Key"], o["Size"]) for o in page.get("Contents", []))
    except (ClientError, BotoCoreError) as e:
        raise StorageError(describe(e)) from e
    files = objects_below(listing, prefix, allow_patterns, ignore_patterns)
    if not files:
        raise StorageError(f"no objects found in bucket {bucket!r} under {prefix!r}"
                           + (" matching the allow/ignore patterns" if allow_patterns or ignore_patterns else ""))
    download_all(files, dest, lambda key, path: s3.download_file(bucket, key, path), describe,
                 concurrency("S3_MAX_FILE_CONCURRENCY"))
