"""The environment KServe's storage initializer reads, read the same way here.

- ``STORAGE_ALLOW_PATTERNS`` / ``STORAGE_IGNORE_PATTERNS``: the file patterns a download keeps / skips when the
  caller gives none; a JSON array (``["*.json", "*.safetensors"]``) or a comma-separated list.
- ``STORAGE_CONFIG`` (JSON, KServe's storage secret entry) with ``STORAGE_OVERRIDE_CONFIG`` (JSON, its keys
  replace the entry's): for ``"type": "s3"`` its keys stand for the S3 variables and win over them, as KServe
  writes them over the environment (here they are read, the environment is left as it is).
- The CA bundle that verifies TLS: ``REQUESTS_CA_BUNDLE``, else ``CURL_CA_BUNDLE`` (as requests reads them),
  else KServe's cluster-wide bundle (``CA_BUNDLE_CONFIGMAP_NAME`` set: ``cabundle.crt`` in
  ``CA_BUNDLE_VOLUME_MOUNT_POINT``, added to the system's trust store), else ``SSL_CERT_FILE``.
"""
import contextlib
import json
import os
import ssl
import tempfile
import threading
from typing import Any, Dict, Iterator, List, Optional, Set

from .common import StorageError

ALLOW_PATTERNS_ENV = "STORAGE_ALLOW_PATTERNS"
IGNORE_PATTERNS_ENV = "STORAGE_IGNORE_PATTERNS"
CONFIG_ENV = "STORAGE_CONFIG"
OVERRIDE_CONFIG_ENV = "STORAGE_OVERRIDE_CONFIG"
CA_CONFIGMAP_ENV = "CA_BUNDLE_CONFIGMAP_NAME"
CA_MOUNT_ENV = "CA_BUNDLE_VOLUME_MOUNT_POINT"
DEFAULT_CA_MOUNT = "/etc/ssl/custom-certs"
CA_FILE_NAME = "cabundle.crt"

#: The S3 variables a ``"type": "s3"`` STORAGE_CONFIG entry sets, by its key (KServe's mapping).
S3_CONFIG_KEYS = {"endpoint_url": "AWS_ENDPOINT_URL", "access_key_id": "AWS_ACCESS_KEY_ID",
                  "secret_access_key": "AWS_SECRET_ACCESS_KEY", "region": "AWS_DEFAULT_REGION",
                  "ca_bundle": "AWS_CA_BUNDLE", "verify_ssl": "S3_VERIFY_SSL", "anonymous": "awsAnonymousCredential"}


def patterns_from_env(name: str) -> Optional[List[str]]:
    """The patterns in variable ``name``: a JSON array, one JSON string, or a comma-separated list; None when
    unset or empty."""
    raw = os.environ.get(name, "").strip()
    if not raw:
        return None
    try:
        value = json.loads(raw)
    except ValueError:
        found = [part.strip() for part in raw.split(",") if part.strip()]
        return found or None
    items = value if isinstance(value, list) else [value]
    found = [str(item).strip() for item in items if str(item).strip()]
    return found or None


def _json_object(name: str) -> Dict[str, Any]:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return {}
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as e:  # the message says where, never what: the value holds secrets
        raise StorageError(f"{name} is not valid JSON ({e.msg} at character {e.pos})") from None
    if not isinstance(value, dict):
        raise StorageError(f"{name} must be a JSON object, got {type(value).__name__}")
    return value


def storage_config() -> Dict[str, Any]:
    """STORAGE_CONFIG with the keys of STORAGE_OVERRIDE_CONFIG written over it."""
    return {**_json_object(CONFIG_ENV), **_json_object(OVERRIDE_CONFIG_ENV)}


def _as_env_value(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def s3_config() -> Dict[str, str]:
    """The S3 variables STORAGE_CONFIG (type ``s3``) sets, by variable name."""
    config = storage_config()
    if config.get("type") != "s3":
        return {}
    return {env: _as_env_value(config[key]) for key, env in S3_CONFIG_KEYS.items() if key in config}


def get(name: str, default: Optional[str] = None) -> Optional[str]:
    """Variable ``name`` as KServe's storage sees it: STORAGE_CONFIG's value first, then the environment's."""
    from_config = s3_config().get(name)
    if from_config is not None:
        return from_config
    return os.environ.get(name, default)


# --- TLS ----------------------------------------------------------------------------------------------------------
_combined_lock = threading.Lock()
_combined: Dict[str, str] = {}  # mounted bundle and its mtime -> the file combining it with the default store
_warned: Set[str] = set()


def cluster_ca_file() -> Optional[str]:
    """KServe's cluster-wide CA bundle file when CA_BUNDLE_CONFIGMAP_NAME says one is mounted, else None."""
    if not os.environ.get(CA_CONFIGMAP_ENV):
        return None
    return os.path.join(os.environ.get(CA_MOUNT_ENV) or DEFAULT_CA_MOUNT, CA_FILE_NAME)


def _combine_with_defaults(mounted: str) -> str:
    """One file holding the system's trust store, certifi's (when installed) and ``mounted``: a bundle named by
    SSL_CERT_FILE or GIT_SSL_CAINFO replaces the default store, and the mounted one should extend it."""
    key = f"{mounted}@{os.stat(mounted).st_mtime_ns}"  # a rotated bundle is combined again
    with _combined_lock:
        if key in _combined and os.path.exists(_combined[key]):
            return _combined[key]
        sources = []
        system = ssl.get_default_verify_paths().openssl_cafile
        if system and os.path.isfile(system):
            sources.append(system)
        try:
            import certifi
            sources.append(certifi.where())
        except ImportError:
            pass
        fd, path = tempfile.mkstemp(prefix="kserve-sdk-ca-", suffix=".crt")
        with os.fdopen(fd, "wb") as out:
            for source in sources + [mounted]:
                with open(source, "rb") as f:
                    out.write(f.read().rstrip(b"\n") + b"\n")
        _combined[key] = path
        return path


def ca_bundle() -> Optional[str]:
    """The CA file (or directory) that verifies TLS for http(s), git and hf downloads; None: the default store.
    A cluster-wide bundle that is named but missing is warned about and left out, as KServe does."""
    for name in ("REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE"):
        if os.environ.get(name):
            return os.environ[name]
    mounted = cluster_ca_file()
    if mounted is not None:
        if os.path.isfile(mounted):
            return _combine_with_defaults(mounted)
        if mounted not in _warned:  # KServe goes on with the default store too
            _warned.add(mounted)
            from ..logging import logger

            logger.warning("Model storage: %s is set but %s does not exist; using the default trust store",
                           CA_CONFIGMAP_ENV, mounted)
    return os.environ.get("SSL_CERT_FILE") or None


def ssl_context() -> Optional[ssl.SSLContext]:
    """A client TLS context trusting :func:`ca_bundle`; None for the default one."""
    bundle = ca_bundle()
    if bundle is None:
        return None
    try:
        if os.path.isdir(bundle):
            return ssl.create_default_context(capath=bundle)
        return ssl.create_default_context(cafile=bundle)
    except (OSError, ssl.SSLError) as e:
        raise StorageError(f"cannot read the CA bundle {bundle}: {e}") from e


@contextlib.contextmanager
def tls_environment(cluster_only: bool = False) -> Iterator[None]:
    """While a library that reads its trust store from the environment downloads, SSL_CERT_FILE (or SSL_CERT_DIR)
    and REQUESTS_CA_BUNDLE both name :func:`ca_bundle` (huggingface_hub reads one or the other depending on its
    version); restored afterwards. ``cluster_only``: only for KServe's cluster-wide bundle, and only where neither
    is set, as KServe exports it for google-cloud-storage and azure (which read REQUESTS_CA_BUNDLE themselves)."""
    bundle = ca_bundle()
    cert_name = "SSL_CERT_DIR" if bundle and os.path.isdir(bundle) else "SSL_CERT_FILE"
    names = (cert_name, "REQUESTS_CA_BUNDLE")
    if cluster_only and (cluster_ca_file() is None or any(os.environ.get(n) for n in ("SSL_CERT_FILE", *names))):
        bundle = None
    if bundle is None or all(os.environ.get(name) == bundle for name in names):
        yield
        return
    saved = {name: os.environ.get(name) for name in names}
    os.environ.update({name: bundle for name in names})
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
