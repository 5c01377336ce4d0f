"""Azure Blob Storage, ``https://<account>.blob.core.windows.net/<container>/<path>``, with
azure-storage-blob (``pip install kserve-sdk[azure]``).

Credentials, first found wins: ``AZURE_STORAGE_CONNECTION_STRING`` (its endpoint is used, so it can point
at Azurite or a sovereign cloud); a SAS token in the URI's query string; ``AZURE_STORAGE_ACCESS_KEY`` (the
account key of the URI's account); a service principal ``AZURE_CLIENT_ID`` / ``AZURE_CLIENT_SECRET`` /
``AZURE_TENANT_ID`` (or KServe's ``AZ_CLIENT_ID`` / ``AZ_CLIENT_SECRET`` / ``AZ_TENANT_ID``; needs
azure-identity); else anonymous access (public containers). Requests are retried
``KSERVE_SDK_STORAGE_RETRIES`` times (default 3). As in KServe, ``AZURE_MAX_FILE_CONCURRENCY`` blobs are
downloaded at once (default KSERVE_SDK_STORAGE_CONCURRENCY, 8) and a large blob in ``AZURE_MAX_CHUNK_CONCURRENCY``
parallel ranges (default 4).
"""
import os
from typing import Any
from urllib.parse import unquote, urlparse

from . import settings
from .common import Patterns, StorageError, concurrency, download_all, env_float, env_int, objects_below, require

BLOB_HOST_SUFFIX = ".blob.core.windows.net"


def is_azure_blob(uri: str) -> bool:
    parsed = urlparse(uri)
    return parsed.scheme in ("http", "https") and (parsed.hostname or "").endswith(BLOB_HOST_SUFFIX)


def _principal():
    client_id = os.environ.get("AZURE_CLIENT_ID") or os.environ.get("AZ_CLIENT_ID")
    secret = os.environ.get("AZURE_CLIENT_SECRET") or os.environ.get("AZ_CLIENT_SECRET")
    tenant = os.environ.get("AZURE_TENANT_ID") or os.environ.get("AZ_TENANT_ID")
    if not (client_id and secret and tenant):
        return None
    identity = require("azure.identity", "azure", "azure-identity")
    return identity.ClientSecretCredential(tenant, client_id, secret)


def service(uri: str):
    blob = require("azure.storage.blob", "azure", "azure-storage-blob")
    parsed = urlparse(uri)
    options = {"retry_total": max(0, env_int("KSERVE_SDK_STORAGE_RETRIES", 3) - 1),
               "connection_timeout": 10, "read_timeout": env_float("KSERVE_SDK_STORAGE_TIMEOUT", 60.0)}
    connection_string = os.environ.get("AZURE_STORAGE_CONNECTION_STRING")
    if connection_string:
        return blob.BlobServiceClient.from_connection_string(connection_string, **options)
    account = (parsed.hostname or "").split(".", 1)[0]
    credential: Any = parsed.query or None
    if credential is None and os.environ.get("AZURE_STORAGE_ACCESS_KEY"):
        credential = {"account_name": account, "account_key": os.environ["AZURE_STORAGE_ACCESS_KEY"]}
    if credential is None:
        credential = _principal()
    return blob.BlobServiceClient(f"{parsed.scheme}://{parsed.netloc}", credential=credential, **options)


def describe(error: Exception) -> str:
    code = getattr(error, "error_code", None)
    code = getattr(code, "value", code)  # a StorageErrorCode enum, or a plain string
    status = getattr(error, "status_code", None)
    message = str(getattr(error, "reason", None) or getattr(error, "message", None) or error)
    message = message.splitlines()[0] if message else ""
    from azure.core.exceptions import ServiceRequestError

    if isinstance(error, ServiceRequestError):
        return f"cannot reach the blob endpoint: {message}"
    label = code or status or type(error).__name__
    return f"{label}: {message}" if message else str(label)


def download(uri: str, dest: str, allow_patterns: Patterns = None, ignore_patterns: Patterns = None) -> None:
    with settings.tls_environment(cluster_only=True):
        _download(uri, dest, allow_patterns, ignore_patterns)


def _download(uri: str, dest: str, allow_patterns: Patterns, ignore_patterns: Patterns) -> None:
    parsed = urlparse(uri)
    container, _, prefix = unquote(parsed.path).lstrip("/").partition("/")
    if not container:
        raise StorageError("no container in the URI (expected https://<account>.blob.core.windows.net/"
                           "<container>/<path>)")
    client = service(uri).get_container_client(container)
    try:
        listing = [(b.name, b.size) for b in client.list_blobs(name_starts_with=prefix or None)]
    except Exception as e:
        raise StorageError(describe(e)) from e
    files = objects_below(listing, prefix, allow_patterns, ignore_patterns)
    if not files:
        raise StorageError(f"no blobs found in container {container!r} under {prefix!r}"
                           + (" matching the allow/ignore patterns" if allow_patterns or ignore_patterns else ""))

    chunks = chunk_concurrency()

    def fetch(name: str, path: str) -> None:
        with open(path, "wb") as f:
            client.download_blob(name, max_concurrency=chunks).readinto(f)

    download_all(files, dest, fetch, describe, concurrency("AZURE_MAX_FILE_CONCURRENCY"))


def chunk_concurrency() -> int:
    """Parallel ranges of one large blob (KServe's AZURE_MAX_CHUNK_CONCURRENCY, default 4)."""
    return max(1, env_int("AZURE_MAX_CHUNK_CONCURRENCY", 4))
