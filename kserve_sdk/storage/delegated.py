"""Schemes read by KServe's own ``kserve_storage`` package when it is installed: ``oci://`` (a modelcar
image), ``modelscope://``, ``hdfs://`` and ``webhdfs://``, and any other scheme this package does not read.

kserve_storage reads its own variables for them (``KSERVE_OCI_DOCKER_CONFIG``, ``KSERVE_OCI_INSECURE_REGISTRY``,
``MODELSCOPE_API_TOKEN``, ``HDFS_SECRET_DIR`` and STORAGE_CONFIG's ``hdfs`` entries); without it, the error
names what to install.
"""
import tempfile
from typing import Optional

from . import progress
from .common import Patterns, StorageError, UnsupportedStorage

SUPPORTED = ("a local path", "file://", "pvc://", "http://", "https://", "s3://", "gs://",
             "https://<account>.blob.core.windows.net/", "hf://", "https://<host>/<repo>.git")
#: What ``pip install`` needs for each scheme kserve_storage reads (its hdfs client is not one of its dependencies).
NEEDS = {"oci": "kserve-storage", "modelscope": "kserve-storage", "hdfs": "kserve-storage hdfs[kerberos] krbcontext",
         "webhdfs": "kserve-storage hdfs[kerberos] krbcontext"}


def unsupported(scheme: str, uri: str) -> UnsupportedStorage:
    """The error for a scheme nothing installed reads: what is supported, and what to install for this one."""
    listed = ", ".join(SUPPORTED)
    if scheme in NEEDS:
        return UnsupportedStorage(f"unsupported scheme '{scheme}://'; supported: {listed}; {scheme}:// URIs are read "
                                  f"by KServe's kserve-storage package, which is not installed: "
                                  f"pip install {NEEDS[scheme]}", uri)
    return UnsupportedStorage(f"unsupported scheme '{scheme}://'; supported: {listed} (pip install kserve-storage "
                              "for KServe's others: oci://, modelscope://, hdfs://, webhdfs://)", uri)


def download(uri: str, scheme: str, out_dir: Optional[str], allow_patterns: Patterns,
             ignore_patterns: Patterns) -> str:
    """``kserve_storage.Storage.download(uri, out_dir, ...)`` (``out_dir`` a new temporary directory when None),
    its failure a StorageError."""
    try:
        from kserve_storage import Storage as KServeStorage
    except ImportError as e:
        if e.name != "kserve_storage":  # installed, but something it imports is not
            raise StorageError(f"kserve_storage cannot be imported: {e}", uri) from e
        raise unsupported(scheme, uri) from None
    if KServeStorage.__module__.startswith("kserve_sdk"):  # an alias of this package, not KServe's: no loop
        raise unsupported(scheme, uri)
    patterns = {}
    if allow_patterns:
        patterns["allow_patterns"] = [allow_patterns] if isinstance(allow_patterns, str) else list(allow_patterns)
    if ignore_patterns:
        patterns["ignore_patterns"] = [ignore_patterns] if isinstance(ignore_patterns, str) else list(ignore_patterns)
    target = out_dir if out_dir is not None else tempfile.mkdtemp(prefix="kserve-sdk-model-")
    try:
        with progress.watching(uri, target):
            return KServeStorage.download(uri, target, **patterns)
    except Exception as e:
        cause = str(e).strip().splitlines()[0] if str(e).strip() else ""
        raise StorageError(f"kserve_storage: {type(e).__name__}: {cause}", uri) from e
