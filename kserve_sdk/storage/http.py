"""``http(s)://``: one file, streamed to disk.

The file keeps the name from ``Content-Disposition`` when the server sends one, else the last segment of
the URL path. Extra request headers come from the environment variable ``<host>-headers`` holding a JSON
object, as KServe reads them (e.g. ``models.example.com-headers='{"Authorization": "Bearer ..."}'``).
Connection failures, timeouts, 429 and 5xx answers and truncated bodies are retried
(``KSERVE_SDK_STORAGE_RETRIES`` attempts, default 3); the size is checked against ``Content-Length``.
TLS is verified against ``REQUESTS_CA_BUNDLE``, ``CURL_CA_BUNDLE``, KServe's cluster-wide bundle or
``SSL_CERT_FILE``, the first set (settings.py), else the system's trust store.
"""
import base64
import http.client
import json
import os
import ssl
import time
import urllib.error
import urllib.request
from typing import Dict, Optional
from urllib.parse import unquote, urlparse

from . import progress, settings
from .common import Patterns, StorageError, env_float, env_int

HEADERS_SUFFIX = "-headers"
CHUNK = 1 << 20


class _Retryable(Exception):
    pass


def extra_headers(host: str) -> Dict[str, str]:
    raw = os.environ.get(host + HEADERS_SUFFIX)
    if not raw:
        return {}
    try:
        headers = json.loads(raw)
    except ValueError as e:
        raise StorageError(f"the environment variable {host}{HEADERS_SUFFIX} is not a JSON object: {e}") from e
    if not isinstance(headers, dict):
        raise StorageError(f"the environment variable {host}{HEADERS_SUFFIX} is not a JSON object")
    return {str(k): str(v) for k, v in headers.items()}


def _file_name(response, uri: str) -> str:
    name = response.headers.get_filename()  # Content-Disposition filename= / filename*= (RFC 2231)
    if name:
        name = os.path.basename(name.replace("\\", "/"))
    if not name or name in (".", ".."):
        name = os.path.basename(unquote(urlparse(uri).path))
    if not name or name in (".", ".."):
        name = "model"
    return name


def _fetch_once(uri: str, headers: Dict[str, str], dest: str, timeout: float, context: Optional[ssl.SSLContext]) -> str:
    request = urllib.request.Request(uri, headers=headers)
    host = urlparse(uri).netloc.rsplit("@", 1)[-1]
    try:
        response = urllib.request.urlopen(request, timeout=timeout, context=context)
    except urllib.error.HTTPError as e:
        e.close()
        cause = f"HTTP {e.code} {e.reason}"
        if e.code == 429 or e.code >= 500:
            raise _Retryable(cause) from e
        raise StorageError(cause) from e
    except urllib.error.URLError as e:
        if isinstance(e.reason, ssl.SSLCertVerificationError):  # a retry would not change the certificate
            raise StorageError(f"cannot verify the TLS certificate of {host}: {e.reason.verify_message} (a private "
                               "CA: REQUESTS_CA_BUNDLE, CURL_CA_BUNDLE or SSL_CERT_FILE names its bundle)") from e
        raise _Retryable(f"cannot reach {host}: {e.reason}") from e
    except (TimeoutError, ConnectionError, http.client.HTTPException) as e:
        raise _Retryable(f"cannot reach {host}: {type(e).__name__}: {e}") from e
    with response:
        name = _file_name(response, uri)
        path = os.path.join(dest, name)
        length = response.headers.get("Content-Length")
        expected = int(length) if length and length.isdigit() else None
        progress.expect(expected)
        received = 0
        try:
            with open(path, "wb") as f:
                while True:
                    chunk = response.read1(CHUNK)  # what has arrived: the progress lines see it
                    if not chunk:
                        break
                    f.write(chunk)
                    received += len(chunk)
        except http.client.IncompleteRead as e:
            received += len(e.partial)
            raise _Retryable(f"{name}: connection closed after {received} of {expected} bytes") from e
        except (TimeoutError, ConnectionError, http.client.HTTPException) as e:
            raise _Retryable(f"{name}: {type(e).__name__} after {received} bytes: {e}") from e
        if expected is not None and received != expected:
            raise _Retryable(f"{name}: received {received} bytes, Content-Length says {expected}")
    return name


def download(uri: str, dest: str, allow_patterns: Patterns = None, ignore_patterns: Patterns = None) -> None:
    """Fetch the file at ``uri`` into the (empty) directory ``dest``."""
    parsed = urlparse(uri)
    headers = extra_headers(parsed.hostname or "")
    if parsed.username is not None:  # user info becomes Basic auth (urllib would read it as a port)
        user_pass = f"{unquote(parsed.username)}:{unquote(parsed.password or '')}".encode()
        headers.setdefault("Authorization", "Basic " + base64.b64encode(user_pass).decode())
        uri = parsed._replace(netloc=parsed.netloc.rsplit("@", 1)[1]).geturl()
    attempts = max(1, env_int("KSERVE_SDK_STORAGE_RETRIES", 3))
    timeout = env_float("KSERVE_SDK_STORAGE_TIMEOUT", 60.0)
    context = settings.ssl_context() if parsed.scheme == "https" else None
    for attempt in range(1, attempts + 1):
        for entry in os.listdir(dest):  # a retry starts clean
            os.remove(os.path.join(dest, entry))
        try:
            _fetch_once(uri, headers, dest, timeout, context)
            return
        except _Retryable as e:
            if attempt == attempts:
                raise StorageError(f"{e} (after {attempts} attempts)") from e
            time.sleep(min(0.2 * 2 ** (attempt - 1), 5.0))
