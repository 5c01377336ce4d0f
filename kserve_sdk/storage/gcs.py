"""``gs://bucket/prefix`` with google-cloud-storage (``pip install kserve-sdk[gcs]``).

Credentials come from Application Default Credentials (``GOOGLE_APPLICATION_CREDENTIALS`` etc.); with
none, the bucket is read anonymously (public buckets). ``STORAGE_EMULATOR_HOST`` points the client at an
emulator. ``GOOGLE_CLOUD_PROJECT`` is optional. Transient failures are retried for
``KSERVE_SDK_STORAGE_RETRY_SECONDS`` (default 30).
"""
import os

from . import settings
from .common import Patterns, StorageError, bucket_and_prefix, download_all, env_float, objects_below, require


def client():
    storage = require("google.cloud.storage", "gcs", "google-cloud-storage")
    from google.auth.exceptions import DefaultCredentialsError

    try:
        return storage.Client(project=os.environ.get("GOOGLE_CLOUD_PROJECT"))
    except DefaultCredentialsError:
        return storage.Client.create_anonymous_client()


def describe(error: Exception) -> str:
    from google.api_core import exceptions as gexc

    if isinstance(error, gexc.RetryError):
        cause = error.cause if error.cause is not None else error
        return f"cannot reach {_endpoint()}: {type(cause).__name__}: {cause}"
    if isinstance(error, gexc.GoogleAPICallError):
        message = error.message or ""
        return f"{error.code} {type(error).__name__}" + (f": {message}" if message else "")
    if _is_connection_error(error):
        return f"cannot reach {_endpoint()}: {type(error).__name__}: {error}"
    return f"{type(error).__name__}: {error}"


def _is_connection_error(error: Exception) -> bool:
    try:
        import requests
    except ImportError:  # pragma: no cover - google-cloud-storage depends on requests
        return False
    return isinstance(error, (requests.ConnectionError, requests.Timeout))


def _endpoint() -> str:
    return os.environ.get("STORAGE_EMULATOR_HOST") or "storage.googleapis.com"


def download(uri: str, dest: str, allow_patterns: Patterns = None, ignore_patterns: Patterns = None) -> None:
    with settings.tls_environment(cluster_only=True):
        _download(uri, dest, allow_patterns, ignore_patterns)


def _download(uri: str, dest: str, allow_patterns: Patterns, ignore_patterns: Patterns) -> None:
    bucket_name, prefix = bucket_and_prefix(uri, "gs://bucket/prefix")
    from google.api_core import exceptions as gexc
    from google.cloud.storage.retry import DEFAULT_RETRY

    gcs = client()
    retry = DEFAULT_RETRY.with_deadline(env_float("KSERVE_SDK_STORAGE_RETRY_SECONDS", 30.0))
    timeout = env_float("KSERVE_SDK_STORAGE_TIMEOUT", 60.0)
    try:
        blobs = {b.name: b for b in gcs.list_blobs(bucket_name, prefix=prefix, retry=retry, timeout=timeout)}
    except gexc.NotFound as e:
        raise StorageError(f"bucket {bucket_name!r} not found ({describe(e)})") from e
    except Exception as e:
        raise StorageError(describe(e)) from e
    files = objects_below(((n, b.size) for n, b in blobs.items()), prefix, allow_patterns, ignore_patterns)
    if not files:
        raise StorageError(f"no objects found in bucket {bucket_name!r} under {prefix!r}"
                           + (" matching the allow/ignore patterns" if allow_patterns or ignore_patterns else ""))
    download_all(files, dest, lambda name, path: blobs[name].download_to_filename(
        path, retry=retry, timeout=timeout), describe)
