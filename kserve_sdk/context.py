"""Process-wide settings the server hands to models (KServe's ``kserve.context``).

Set once by ``ModelServer`` before any worker forks, so every worker process sees the same values.
"""
from typing import Optional

from .predictor_config import PredictorConfig

_predictor_config: Optional[PredictorConfig] = None


def set_predictor_config(config: Optional[PredictorConfig]) -> None:
    """Set the predictor configuration models without their own use."""
    global _predictor_config
    _predictor_config = config


def get_predictor_config() -> Optional[PredictorConfig]:
    """The predictor configuration set by the server, or None."""
    return _predictor_config
