"""The Open Inference Protocol datatypes and their numpy equivalents."""
from typing import Dict, Optional

import numpy as np

# v2 datatype -> numpy dtype. BYTES holds Python bytes/str objects.
NP_DTYPES: Dict[str, np.dtype] = {
    "BOOL": np.dtype(np.bool_),
    "INT8": np.dtype(np.int8),
    "INT16": np.dtype(np.int16),
    "INT32": np.dtype(np.int32),
    "INT64": np.dtype(np.int64),
    "UINT8": np.dtype(np.uint8),
    "UINT16": np.dtype(np.uint16),
    "UINT32": np.dtype(np.uint32),
    "UINT64": np.dtype(np.uint64),
    "FP16": np.dtype(np.float16),
    "FP32": np.dtype(np.float32),
    "FP64": np.dtype(np.float64),
    "BYTES": np.dtype(np.object_),
}

# BF16 has no numpy type: it travels as raw 2-byte elements and is read as uint16 bit patterns.
RAW_ONLY_DTYPES: Dict[str, np.dtype] = {"BF16": np.dtype(np.uint16)}

DATATYPES = frozenset(NP_DTYPES) | frozenset(RAW_ONLY_DTYPES)

_FROM_NP: Dict[np.dtype, str] = {v: k for k, v in NP_DTYPES.items()}


def np_dtype_of(datatype: str) -> Optional[np.dtype]:
    """The numpy dtype a v2 datatype is read as, or None for an unknown datatype."""
    return NP_DTYPES.get(datatype) or RAW_ONLY_DTYPES.get(datatype)


def datatype_of(np_dtype) -> Optional[str]:
    """The v2 datatype for a numpy dtype: strings and objects are BYTES; None when there is none."""
    dt = np.dtype(np_dtype)
    found = _FROM_NP.get(dt)
    if found is not None:
        return found
    if dt.kind in ("U", "S", "O"):
        return "BYTES"
    if dt.kind in ("i", "u", "f", "b"):
        return _FROM_NP.get(dt.newbyteorder("="))
    return None


def element_size(datatype: str) -> int:
    """Bytes per element on the wire for fixed-size datatypes; 0 for BYTES; ValueError for a name that is not
    a v2 datatype."""
    if datatype == "BYTES":
        return 0
    dtype = np_dtype_of(datatype)
    if dtype is None:
        raise ValueError(f"{datatype!r} is not a v2 datatype")
    return dtype.itemsize
