"""The parts of a v2 inference request and response below the codecs: the tensor classes
``InferInput`` / ``InferOutput``, ``RequestedOutput``, and :class:`InferMessage`, the base of
``InferRequest`` / ``InferResponse``.

They live here, under their KServe import path :mod:`kserve_sdk.protocol.infer_type`, so that the
codecs (:mod:`.rest_codec`, :mod:`.grpc.convert`) can build them without importing ``infer_type``,
whose classes call the codecs.
"""
from typing import Any, Dict, Optional

import numpy as np

from .tensor import Tensor


class InferMessage:
    """A v2 inference request or response: JSON-writable as its ``to_dict()``."""

    def to_dict(self) -> Dict:
        """The message as a v2 JSON object."""
        raise NotImplementedError


class InferInput(Tensor):
    """An input tensor of an inference request: ``InferInput(name, shape, datatype, data=None, parameters=None)``."""

    def set_data_from_numpy(self, input_tensor: np.ndarray, binary_data: bool = True) -> None:
        """Set the content from a numpy array; ``binary_data`` sends it as raw bytes instead of JSON.

        Raises InferenceError when the array's dtype or shape differs from the tensor's.
        """
        Tensor.set_data_from_numpy(self, input_tensor, binary_data)


class InferOutput(Tensor):
    """An output tensor of an inference response: ``InferOutput(name, shape, datatype, data=None, parameters=None)``."""

    def set_data_from_numpy(self, output_tensor: np.ndarray, binary_data: bool = True) -> None:
        """Set the content from a numpy array; ``binary_data`` sends it as raw bytes instead of JSON.

        Raises InferenceError when the array's dtype or shape differs from the tensor's.
        """
        Tensor.set_data_from_numpy(self, output_tensor, binary_data)


class RequestedOutput:
    """An output the client asked for by name, optionally with ``parameters={"binary_data": True}``."""

    def __init__(self, name: str, parameters: Optional[Dict] = None):
        self._name = name
        self._parameters = parameters

    @property
    def name(self) -> str:
        """The requested output's name."""
        return self._name

    @property
    def parameters(self) -> Optional[Dict]:
        """The requested output's parameters, or None."""
        return self._parameters

    @parameters.setter
    def parameters(self, value: Optional[Dict]) -> None:
        self._parameters = value

    @property
    def binary_data(self) -> Optional[bool]:
        """True/False when the client said how this output is to be sent; None when it did not."""
        if self._parameters and "binary_data" in self._parameters:
            return bool(param_value(self._parameters["binary_data"]))
        return None

    def __eq__(self, other: object) -> bool:
        return isinstance(other, RequestedOutput) and (self.name, self.parameters) == (other.name, other.parameters)

    def __repr__(self) -> str:
        return f"RequestedOutput(name={self._name!r}, parameters={self._parameters!r})"


def param_value(value: Any) -> Any:
    """A parameter's plain value, whether it came as JSON or as a gRPC ``InferParameter``."""
    kind = getattr(value, "WhichOneof", None)
    if kind is not None:
        field = kind("parameter_choice")
        return getattr(value, field) if field else None
    return value
