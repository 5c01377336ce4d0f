"""REST wire vocabularies beside KServe v1 and v2, at KServe's import paths (``timeseries``, ``openai``).

Each is imported when first named (``kserve_sdk.protocol.rest.openai``), not with this package."""
import importlib
from typing import Any

_SUBPACKAGES = ("openai", "timeseries")


def __getattr__(name: str) -> Any:
    if name in _SUBPACKAGES:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
