"""``hf://<owner>/<model>[:<revision>]``: a Hugging Face Hub model repository, with huggingface_hub
(``pip install kserve-sdk[hf]``), as KServe reads it.

The revision is a branch, a tag or a commit (default: the repository's default branch). ``HF_ENDPOINT`` points
at another hub or a mirror; ``HF_TOKEN`` is sent (``Authorization: Bearer``) for private and gated models; the
allow / ignore patterns select files as huggingface_hub's ``snapshot_download`` does. The files land in the
model directory itself (no symbolic links into a cache), without huggingface_hub's ``.cache`` bookkeeping, and
nothing is written outside it (not even in ``HF_HOME``).
"""
import inspect
import os
import shutil
from typing import Any, Dict, Optional, Tuple

from . import progress, settings
from .common import Patterns, StorageError, require, selected

PREFIX = "hf://"
FORM = "hf://owner/model[:revision]"
BOOKKEEPING = (".cache", "huggingface")  # what huggingface_hub keeps below a local_dir


def parse(uri: str) -> Tuple[str, Optional[str]]:
    """(repository id, revision or None) of an ``hf://`` URI; StorageError naming the expected form."""
    parts = uri[len(PREFIX):].split("/")
    if len(parts) != 2:
        raise StorageError(f"invalid Hugging Face URI: expected '{FORM}'")
    owner, model_part = parts
    model, _, revision = model_part.partition(":")
    if not owner:
        raise StorageError(f"the Hugging Face repository owner is empty (expected '{FORM}')")
    if not model:
        raise StorageError(f"the Hugging Face model name is empty (expected '{FORM}')")
    return f"{owner}/{model}", revision or None


def _endpoint() -> str:
    return (os.environ.get("HF_ENDPOINT") or "https://huggingface.co").rstrip("/")


def _quiet_progress_class(hub: Any) -> Any:
    """huggingface_hub's progress bars, always off: the server logs its own progress lines instead."""
    base = hub.utils.tqdm

    class Quiet(base):  # type: ignore[misc, valid-type]
        def __init__(self, *args: Any, **kwargs: Any):
            kwargs["disable"] = True
            super().__init__(*args, **kwargs)

    return Quiet


def _arguments(hub: Any, repo_id: str, revision: Optional[str], dest: str, allow_patterns: Patterns,
               ignore_patterns: Patterns) -> Dict[str, Any]:
    wanted: Dict[str, Any] = {
        "repo_id": repo_id, "revision": revision, "local_dir": dest, "endpoint": _endpoint(),
        "cache_dir": os.path.join(dest, *BOOKKEEPING, "hub"),  # its refs too: nothing written outside dest
        "token": os.environ.get("HF_TOKEN") or None, "allow_patterns": allow_patterns or None,
        "ignore_patterns": ignore_patterns or None, "tqdm_class": _quiet_progress_class(hub),
        "local_dir_use_symlinks": False,  # older huggingface_hub: real files, not links into its cache
    }
    accepted = inspect.signature(hub.snapshot_download).parameters
    return {name: value for name, value in wanted.items() if name in accepted}


def _expected_bytes(hub: Any, repo_id: str, revision: Optional[str], allow_patterns: Patterns,
                    ignore_patterns: Patterns) -> Optional[int]:
    """The size of the files the download will bring, from the model's info with file sizes (one request, not
    retried: an unreachable hub is reported by the download itself, at once); None when unknown."""
    try:
        api = hub.HfApi(endpoint=_endpoint(), token=os.environ.get("HF_TOKEN") or None)
        info = api.model_info(repo_id, revision=revision, files_metadata=True)
        sizes = {f.rfilename: getattr(f, "size", None) for f in info.siblings or []}
    except Exception:
        return None
    known = {name: size for name, size in sizes.items() if isinstance(size, int)}
    if len(known) != len(sizes):
        return None
    return sum(size for name, size in known.items() if selected(name, allow_patterns, ignore_patterns)) or None


def describe(error: BaseException, repo_id: str, revision: Optional[str]) -> str:
    """One line saying why huggingface_hub failed, in the user's terms."""
    kinds = {cls.__name__ for cls in type(error).__mro__}
    response = getattr(error, "response", None)
    status = getattr(response, "status_code", None)
    at = f" at revision '{revision}'" if revision else ""
    if "RevisionNotFoundError" in kinds:
        return f"revision '{revision}' not found in {repo_id} on {_endpoint()}"
    if "GatedRepoError" in kinds:
        return f"{repo_id} is gated on {_endpoint()}: set HF_TOKEN to a token that was granted access"
    if "RepositoryNotFoundError" in kinds or status in (401, 403):
        token = "HF_TOKEN was refused" if os.environ.get("HF_TOKEN") else "private models need HF_TOKEN"
        return f"{repo_id} not found on {_endpoint()}, or not readable ({token}; HTTP {status})"
    if "LocalEntryNotFoundError" in kinds or "OfflineModeIsEnabled" in kinds:
        cause = error.__cause__ or error.__context__ or error
        return f"cannot reach {_endpoint()} for {repo_id}{at}: {type(cause).__name__}: {_first_line(cause)}"
    if status is not None:
        return f"{repo_id}{at}: HTTP {status} from {_endpoint()}: {_first_line(error)}"
    return f"{repo_id}{at}: {type(error).__name__}: {_first_line(error)}"


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else ""


def _remove_bookkeeping(dest: str) -> None:
    """huggingface_hub's ``.cache/huggingface`` below a local_dir (download metadata), and ``.cache`` if that
    leaves it empty."""
    shutil.rmtree(os.path.join(dest, *BOOKKEEPING), ignore_errors=True)
    try:
        os.rmdir(os.path.join(dest, BOOKKEEPING[0]))
    except OSError:
        pass


def _has_files(root: str) -> bool:
    return any(names for _, _, names in os.walk(root))


def download(uri: str, dest: str, allow_patterns: Patterns = None, ignore_patterns: Patterns = None) -> None:
    repo_id, revision = parse(uri)
    hub = require("huggingface_hub", "hf", "huggingface_hub")
    close_session = getattr(hub, "close_session", None)  # its shared client keeps the TLS settings it began with
    with settings.tls_environment():
        if close_session is not None:
            close_session()
        try:
            progress.expect(_expected_bytes(hub, repo_id, revision, allow_patterns, ignore_patterns))
            hub.snapshot_download(**_arguments(hub, repo_id, revision, dest, allow_patterns, ignore_patterns))
        except Exception as e:
            raise StorageError(describe(e, repo_id, revision)) from e
        finally:
            if close_session is not None:
                close_session()
    _remove_bookkeeping(dest)
    if not _has_files(dest):
        matching = " matching the allow/ignore patterns" if allow_patterns or ignore_patterns else ""
        raise StorageError(f"no files in {repo_id}{f' at revision {revision!r}' if revision else ''}{matching}")
