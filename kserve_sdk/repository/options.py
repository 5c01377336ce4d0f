"""How the server serves its model repository: the ``--model_repository`` flags, checked, and the repository's
folder (a storage URI is downloaded first, as ``STORAGE_URI`` is)."""
import argparse
import dataclasses

from ..storage import Storage, StorageError, cache_dir, is_local, redact
from ..storage import local as local_storage
from .errors import RepositoryError

#: ``--model_control_mode``: Triton's three, and ``lazy`` (a model loads on its first request).
NONE, EXPLICIT, POLL, LAZY = "none", "explicit", "poll", "lazy"
MODES = (NONE, EXPLICIT, POLL, LAZY)


@dataclasses.dataclass(frozen=True)
class RepositoryOptions:
    """The repository's flags: ``location`` (a folder or a storage URI), the control ``mode``, the poll period,
    the memory budget (0: no limit) and how many loads run at once."""

    location: str
    mode: str = NONE
    poll_seconds: float = 15.0
    max_loaded_models: int = 0
    max_model_memory_mb: float = 0.0
    load_threads: int = 4

    @classmethod
    def from_flags(cls, flags: argparse.Namespace) -> "RepositoryOptions":
        """The options of the server's flags (``--model_repository``, ``--model_control_mode``, ...)."""
        return cls(flags.model_repository, flags.model_control_mode, flags.repository_poll_secs,
                   flags.max_loaded_models, flags.max_model_memory_mb, flags.model_load_threads)

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"--model_control_mode must be one of {', '.join(MODES)}, got {self.mode!r}")
        if not self.poll_seconds > 0:
            raise ValueError(f"--repository_poll_secs must be above 0, got {self.poll_seconds}")
        if self.max_loaded_models < 0 or self.max_model_memory_mb < 0:
            raise ValueError("--max_loaded_models and --max_model_memory_mb must be 0 (no limit) or more")
        if self.load_threads < 1:
            raise ValueError(f"--model_load_threads must be 1 or more, got {self.load_threads}")

    @property
    def max_bytes(self) -> int:
        """``--max_model_memory_mb`` in bytes (0: no limit)."""
        return int(self.max_model_memory_mb * 2 ** 20)


def resolve_location(location: str) -> str:
    """The local folder of ``--model_repository``: a local path (or ``file://``, ``pvc://``) in place; a remote
    URI (``s3://``, ``gs://``, ``https://``, ...) or an archive downloaded and unpacked once, into the model
    cache (``KSERVE_SDK_MODEL_CACHE``). A failure is a RepositoryError naming the flag."""
    try:
        if is_local(location) and not local_storage.is_archive_file(location):
            return Storage.download(location)
        return Storage.download(location, cache_dir(location))
    except StorageError as e:
        raise RepositoryError(f"--model_repository {redact(location)}", e.cause) from None
