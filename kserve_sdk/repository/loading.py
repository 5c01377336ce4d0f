"""The part of a model's load that runs on a load thread (``--model_load_threads``), off the event loop: its
fingerprint, the model object built and prepared, and its ``load()``, with the process's memory before it."""
import inspect
from typing import Any, Awaitable, NamedTuple, Optional

from .implementations import build_model, prepare
from .memory import rss_bytes
from .scan import VersionSource, fingerprinted


class Built(NamedTuple):
    """A version's model after its ``load()`` ran on a load thread. ``pending`` is what an ``async def load``
    returned, to be awaited on the event loop; ``rss_before`` the process's resident memory before the load."""

    source: VersionSource
    model: Any
    pending: Optional[Awaitable[Any]]
    rss_before: int


def build_and_load(source: VersionSource) -> Built:
    """Fingerprint the version's files (when the scan did not), build its model, prepare it and call its
    ``load()``. Raises what they raise: RepositoryError naming the file, or the model's own exception."""
    if not source.fingerprint:
        source = fingerprinted(source)
    model = build_model(source)
    prepare(model, source)
    before = rss_bytes()
    result = model.load()
    return Built(source, model, result if inspect.isawaitable(result) else None, before)
