"""The wire vocabulary. ``rest`` (``kserve_sdk.protocol.rest.openai``, ``.timeseries``) is imported when
first named, so ``import kserve_sdk as kserve; kserve.protocol.rest.openai`` works as in KServe."""
import importlib
from typing import Any


def __getattr__(name: str) -> Any:
    if name == "rest":
        return importlib.import_module(f"{__name__}.rest")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
