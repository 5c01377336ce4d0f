"""``s3://bucket/prefix`` with boto3 (``pip install kserve-sdk[s3]``).

Settings, as KServe's storage initializer reads them: ``AWS_ACCESS_KEY_ID`` / ``AWS_SECRET_ACCESS_KEY`` /
``AWS_SESSION_TOKEN`` (or any boto3 credential source), ``AWS_DEFAULT_REGION`` / ``AWS_REGION``,
``AWS_ENDPOINT_URL`` or ``S3_ENDPOINT`` (host[:port]; ``S3_USE_HTTPS=0`` for http), ``S3_VERIFY_SSL=0``,
``AWS_CA_BUNDLE``, ``S3_USER_VIRTUAL_BUCKET=1`` (virtual-hosted addressing) and
``awsAnonymousCredential=true`` (unsigned requests to a public bucket). boto3's ``AWS_MAX_ATTEMPTS`` /
``AWS_RETRY_MODE`` override the default of 3 attempts in standard mode.
"""
import os
from typing import Optional

from ..utils.utils import strtobool
from .common import Patterns, StorageError, bucket_and_prefix, download_all, env_int, objects_below, require


def _flag(name: str, default: bool) -> bool:
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    try:
        return strtobool(value)
    except ValueError:
        return default


def endpoint_url() -> Optional[str]:
    endpoint = os.environ.get("AWS_ENDPOINT_URL") or os.environ.get("S3_ENDPOINT")
    if endpoint and "://" not in endpoint:
        endpoint = ("https://" if _flag("S3_USE_HTTPS", True) else "http://") + endpoint
    return endpoint or None


def client():
    boto3 = require("boto3", "s3", "boto3")
    from botocore import UNSIGNED
    from botocore.config import Config

    config = {"connect_timeout": 10, "read_timeout": 60,
              "max_pool_connections": max(10, env_int("KSERVE_SDK_STORAGE_CONCURRENCY", 8))}
    if not os.environ.get("AWS_MAX_ATTEMPTS") and not os.environ.get("AWS_RETRY_MODE"):
        config["retries"] = {"max_attempts": 3, "mode": "standard"}
    if _flag("awsAnonymousCredential", False):
        config["signature_version"] = UNSIGNED
    if _flag("S3_USER_VIRTUAL_BUCKET", False):
        config["s3"] = {"addressing_style": "virtual"}
    kwargs = {"endpoint_url": endpoint_url(), "config": Config(**config)}
    region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
    if region:
        kwargs["region_name"] = region
    if not _flag("S3_VERIFY_SSL", True):
        kwargs["verify"] = False
    elif os.environ.get("AWS_CA_BUNDLE"):
        kwargs["verify"] = os.environ["AWS_CA_BUNDLE"]
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
        listing = []
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
            listing.extend((o["Key"], o["Size"]) for o in page.get("Contents", []))
    except (ClientError, BotoCoreError) as e:
        raise StorageError(describe(e)) from e
    files = objects_below(listing, prefix, allow_patterns, ignore_patterns)
    if not files:
        raise StorageError(f"no objects found in bucket {bucket!r} under {prefix!r}"
                           + (" matching the allow/ignore patterns" if allow_patterns or ignore_patterns else ""))
    download_all(files, dest, lambda key, path: s3.download_file(bucket, key, path), describe)
