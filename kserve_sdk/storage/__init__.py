"""Where the model files are: ``STORAGE_URI`` resolved to a local directory.

This version resolves local paths, ``file://`` and ``pvc://`` URIs (a PVC is mounted at
``/mnt/models`` by KServe); remote schemes (s3, gs, https, azure) are refused with a clear error.
"""
import os
from typing import Optional
from urllib.parse import urlparse

from ..constants.constants import MODEL_MOUNT_DIRS
from ..errors import InvalidInput


class UnsupportedStorage(InvalidInput):
    """The ``STORAGE_URI`` scheme is not one this server can read."""


class Storage:
    """KServe's ``Storage`` entry point."""

    @staticmethod
    def download(uri: str, out_dir: Optional[str] = None) -> str:
        """Return the local directory (or file) holding the model at ``uri``.

        Local paths and ``file://`` URIs are used in place; ``pvc://claim/path`` maps to
        ``/mnt/models/path``. ``out_dir`` is unused for these schemes since nothing is copied.
        """
        parsed = urlparse(uri)
        if parsed.scheme in ("", "file"):
            return os.path.abspath(os.path.expanduser(parsed.path if parsed.scheme else uri))
        if parsed.scheme == "pvc":
            return os.path.join(MODEL_MOUNT_DIRS, parsed.path.lstrip("/"))
        raise UnsupportedStorage(f"STORAGE_URI scheme '{parsed.scheme}://' is not supported yet: {uri}")


def default_model_dir() -> str:
    """The model directory: ``STORAGE_URI`` resolved when set, else ``/mnt/models``."""
    uri = os.environ.get("STORAGE_URI")
    return Storage.download(uri) if uri else MODEL_MOUNT_DIRS
