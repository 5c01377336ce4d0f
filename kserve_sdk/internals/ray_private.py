"""What kserve_sdk.ray asks of a local Ray that Ray's public API does not tell.

Reaches into Ray: ``ray._private.worker._global_node`` (the node this process started, whose
``dead_processes()`` lists its stopped processes) and ``ray._private.auto_init_hook.enable_auto_connect``
(whether a Ray call may start a new local Ray).

Why: a supervisor that signals the whole process group stops the raylet too; Serve's shutdown would
then wait out its timeout for a cluster that is gone, and Serve's threads would start a fresh Ray after
``ray.shutdown()``. Both internals are read with ``getattr``: when Ray drops them, shutdown only
waits the full timeout and auto-connect stays on.

Not switched off by ``KSERVE_SDK_INTERNALS=off``: without them a stop can hang for the timeout or leave
a Ray running; no public API does the same.
"""
from typing import Any


def local_ray_broken(ray: Any) -> bool:
    """Whether a process of the Ray that ``ray.init()`` started in this process has died."""
    node = getattr(getattr(getattr(ray, "_private", None), "worker", None), "_global_node", None)
    try:
        return bool(node is not None and node.dead_processes())
    except Exception:
        return False


def forbid_auto_connect(ray: Any) -> None:
    """Keep Ray calls (Serve's threads) from starting a new local Ray once this one stops."""
    hook = getattr(getattr(ray, "_private", None), "auto_init_hook", None)
    if hasattr(hook, "enable_auto_connect"):
        hook.enable_auto_connect = False
