"""Import a runtime's library, or say in one line which extra installs it."""
import importlib
from types import ModuleType


class MissingExtra(ImportError):
    """A runtime's library is not installed."""


def import_extra(module: str, extra: str) -> ModuleType:
    """``import module``, or raise MissingExtra naming ``pip install 'kserve-sdk[extra]'``."""
    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise MissingExtra(f"the {extra} runtime needs the {module} package ({e}): "
                           f"pip install 'kserve-sdk[{extra}]'") from None
