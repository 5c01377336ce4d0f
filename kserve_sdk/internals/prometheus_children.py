"""Dropping the children of one model name from a labelled metric, in multi-process mode.

Reaches into a prometheus-client metric: its ``_labelnames``, its ``_metrics`` dict (label values -> child)
and its ``_lock``.

Why: a model repository serves thousands of model names over a server's life; the children of a model no
longer loaded (evicted, unloaded) would stay in memory for good. prometheus-client's public ``remove()``
needs every label value of a child (which only the children dict knows) and warns in multi-process mode,
where it leaves the values in the metric files. The children dropped here are returned, for
:func:`.prometheus_values.let_go` to take their series out of the files.

Plain path (``KSERVE_SDK_INTERNALS=off``): the children stay (each model name ever served keeps its few
kilobytes), as prometheus-client keeps them.
"""
from typing import Any, Iterable, List

from . import ENABLED


def drop_children(metrics: Iterable[Any], first_label_name: str, value: str) -> List[Any]:
    """Forget the children of those ``metrics`` whose first label is ``first_label_name``, set to ``value``;
    returns them (none with the tricks off)."""
    dropped: List[Any] = []
    if not ENABLED:
        return dropped
    for metric in metrics:
        children, lock = getattr(metric, "_metrics", None), getattr(metric, "_lock", None)
        if getattr(metric, "_labelnames", ())[:1] != (first_label_name,) or children is None or lock is None:
            continue
        with lock:
            for labels in [labels for labels in children if labels[:1] == (value,)]:
                dropped.append(children.pop(labels))
    return dropped
