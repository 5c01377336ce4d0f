"""KServe's ``kserve.utils.numpy_codec``: convert between v2 datatypes and numpy dtypes."""
from typing import Optional

from ..protocol.dtypes import datatype_of, np_dtype_of


def to_np_dtype(dtype: str):
    """The numpy type for a v2 datatype (``"FP32"`` -> ``np.float32``), or None if there is none."""
    found = np_dtype_of(dtype)
    return None if found is None or dtype == "BF16" else found.type


def from_np_dtype(np_dtype) -> Optional[str]:
    """The v2 datatype for a numpy dtype (``np.float32`` -> ``"FP32"``), or None if there is none."""
    return datatype_of(np_dtype)
