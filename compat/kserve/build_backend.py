"""kserve-sdk-alias's build backend: setuptools' own, which first refuses to build for an environment that
holds the real KServe (install_guard.py says why)."""
from typing import Any, Dict, Optional

from install_guard import refuse_over_real_kserve
from setuptools import build_meta as _setuptools
from setuptools.build_meta import *  # noqa: F401,F403  (every other hook is setuptools' unchanged)

Settings = Optional[Dict[str, Any]]


def prepare_metadata_for_build_wheel(metadata_directory: str, config_settings: Settings = None) -> str:
    refuse_over_real_kserve()
    return _setuptools.prepare_metadata_for_build_wheel(metadata_directory, config_settings)


def prepare_metadata_for_build_editable(metadata_directory: str, config_settings: Settings = None) -> str:
    refuse_over_real_kserve()
    return _setuptools.prepare_metadata_for_build_editable(metadata_directory, config_settings)


def build_wheel(wheel_directory: str, config_settings: Settings = None,
                metadata_directory: Optional[str] = None) -> str:
    refuse_over_real_kserve()
    return _setuptools.build_wheel(wheel_directory, config_settings, metadata_directory)


def build_editable(wheel_directory: str, config_settings: Settings = None,
                   metadata_directory: Optional[str] = None) -> str:
    refuse_over_real_kserve()
    return _setuptools.build_editable(wheel_directory, config_settings, metadata_directory)
