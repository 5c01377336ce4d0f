"""KServe's import path of the data plane: ``from kserve.protocol.dataplane import DataPlane``.

The class is :class:`kserve_sdk.dataplane.DataPlane` itself; it lives one level up because the wire
handlers and the server build on it, while this package holds the wire vocabulary.
"""
from ..dataplane import DataPlane

__all__ = ["DataPlane"]
