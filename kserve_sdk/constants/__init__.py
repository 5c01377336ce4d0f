"""KServe's ``kserve.constants`` package: ``from kserve_sdk.constants import constants``."""
from . import constants

__all__ = ["constants"]
