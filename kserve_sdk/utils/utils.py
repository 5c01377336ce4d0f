"""KServe's ``kserve.utils.utils`` helpers that custom models use."""
import argparse
import os

# Request ids need to be unique, not secret: the global generator (re-seeded in every forked worker).
from random import getrandbits as _getrandbits
from typing import Dict, List, Optional, Union

import numpy as np

from ..constants.constants import PredictorProtocol
from ..errors import InvalidInput
from ..protocol.dtypes import datatype_of
from ..protocol.infer_type import InferOutput, InferRequest, InferResponse
from .optional_packages import require_pandas


def generate_uuid() -> str:
    """A new random request id (a version-4 UUID string)."""
    # Same result as str(uuid.uuid4()) at a fraction of the cost: one call for 128 random bits.
    n = (_getrandbits(128) & ~(0xF000 << 64) | (0x4000 << 64)) & ~(0xC << 60) | (0x8 << 60)
    h = f"{n:032x}"
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def non_negative_float(text: str) -> float:
    """A flag's value that must be a finite number, 0 or more (argparse type)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not 0 <= value < float("inf"):
        raise argparse.ArgumentTypeError(f"expected a number 0 or more, got {text}")
    return value


def non_negative_int(text: str) -> int:
    """A flag's value that must be a whole number, 0 or more (argparse type)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected 0 or more, got {value}")
    return value


def strtobool(val: str) -> bool:
    """Read a flag value: y/yes/t/true/on/1 are True, n/no/f/false/off/0 are False; else ValueError."""
    if isinstance(val, bool):
        return val
    lowered = str(val).strip().lower()
    if lowered in ("y", "yes", "t", "true", "on", "1"):
        return True
    if lowered in ("n", "no", "f", "false", "off", "0"):
        return False
    raise ValueError(f"invalid truth value {val!r}")


def is_v1(protocol: Union[str, PredictorProtocol]) -> bool:
    """Whether ``protocol`` names KServe v1 REST."""
    return protocol == PredictorProtocol.REST_V1 or str(protocol).lower() == PredictorProtocol.REST_V1.value


def is_v2(protocol: Union[str, PredictorProtocol]) -> bool:
    """Whether ``protocol`` names Open Inference Protocol v2 REST."""
    return protocol == PredictorProtocol.REST_V2 or str(protocol).lower() == PredictorProtocol.REST_V2.value


def cpu_count() -> int:
    """CPUs this process may use, honouring a cgroup (container) CPU limit."""
    count = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    try:
        with open("/sys/fs/cgroup/cpu.max") as f:
            quota, period = f.read().split()
        if quota != "max":
            count = min(count, max(1, int(int(quota) / int(period))))
    except (OSError, ValueError):
        pass
    return count


def get_predict_input(payload: Union[Dict, InferRequest], columns: Optional[List] = None):
    """The model input in a request: a numpy array, a list of strings, or a DataFrame.

    v1: the ``instances`` (or ``inputs``) list; rows of dicts become a pandas DataFrame.
    v2: the first input as numpy, or a DataFrame when the request's ``content_type`` parameter is "pd".
    A DataFrame needs pandas (``pip install 'kserve-sdk[pandas]'``); without it, ModuleNotFoundError says so.
    """
    if isinstance(payload, dict):
        instances = payload["inputs"] if "inputs" in payload else payload.get("instances")
        if instances is None:
            raise InvalidInput('the request has neither "instances" nor "inputs"')
        if len(instances) == 0:
            return np.array(instances)
        first = instances[0]
        if isinstance(first, dict) or (isinstance(first, list) and first and isinstance(first[0], dict)):
            pd = require_pandas("get_predict_input on rows of dicts (a DataFrame)")
            return pd.concat([pd.DataFrame(i, columns=columns) for i in instances], axis=0)
        if isinstance(first, str):
            return instances
        return np.array(instances)
    if isinstance(payload, InferRequest):
        params = payload.parameters or {}
        content_type = params.get("content_type")
        content_type = getattr(content_type, "string_param", content_type)
        if content_type == "pd":
            return payload.as_dataframe()
        first = payload.inputs[0]
        data = first._data
        if first.datatype == "BYTES" and isinstance(data, list) and data and isinstance(data[0], str):
            return data
        return first.as_numpy()
    raise InvalidInput(f"unsupported payload type {type(payload).__name__}")


def get_predict_response(payload: Union[Dict, InferRequest], result, model_name: str) -> Union[Dict, InferResponse]:
    """Wrap a prediction as the response the request's protocol expects.

    v1: ``{"predictions": [...]}``. v2: an InferResponse with one output per DataFrame column, or a
    single ``output-0`` tensor for an array or list.
    """
    return predict_response(payload, result, model_name)


def predict_response(payload: Union[Dict, InferRequest], result, model_name: str,
                     output_name: str = "output-0") -> Union[Dict, InferResponse]:
    """:func:`get_predict_response`, naming a v2 array's one output ``output_name``."""
    if isinstance(payload, dict):
        if hasattr(result, "iterrows"):
            result = [row.to_dict() for _, row in result.iterrows()]
        elif isinstance(result, np.ndarray):
            result = result.tolist()
        return {"predictions": result}
    if not isinstance(payload, InferRequest):
        raise InvalidInput(f"unsupported payload type {type(payload).__name__}")
    binary = payload.use_binary_outputs
    if hasattr(result, "columns"):
        outputs = [_output(str(col), result[col].to_numpy(), binary) for col in result.columns]
    elif isinstance(result, list) and result and isinstance(result[0], str):
        outputs = [_output(output_name, np.array(result, dtype=np.object_), binary)]
    else:
        outputs = [_output(output_name, np.asarray(result), binary)]
    return InferResponse(
        response_id=payload.id or generate_uuid(),
        model_name=model_name,
        infer_outputs=outputs,
        use_binary_outputs=binary,
        requested_outputs=payload.request_outputs,
    )


def _output(name: str, array: np.ndarray, binary: bool) -> InferOutput:
    datatype = datatype_of(array.dtype)
    if datatype is None:
        raise InvalidInput(f"cannot send numpy dtype {array.dtype} as a v2 tensor")
    if datatype == "BYTES" and array.dtype != np.object_:
        array = array.astype(np.object_)
    tensor = InferOutput(name=name, shape=list(array.shape), datatype=datatype)
    tensor.set_data_from_numpy(array, binary_data=binary)
    return tensor
