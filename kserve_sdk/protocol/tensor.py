"""One tensor of a v2 request or response, held in whichever form it arrived in.

A tensor keeps its content in exactly one of three forms until asked for another:
``_raw_data`` (wire bytes: a REST binary slice or a gRPC raw content, read through numpy views without a
copy), ``_array`` (a numpy array the model produced) or ``_data`` (JSON values). Conversions are lazy,
so the hot path never turns a 1 MiB tensor into a Python list unless a JSON answer needs it.
"""
import struct
from math import prod
from typing import Any, Dict, List, Optional, Sequence, Set, Union

import numpy as np

from ..errors import InferenceError, InvalidInput
from .binary import deserialize_bytes_tensor, serialize_bytes_tensor
from .dtypes import DATATYPES, NP_DTYPES, datatype_of, element_size, np_dtype_of

#: The tensor parameter that puts a tensor's content in a system shared-memory region (Triton's extension).
SHM_REGION = "shared_memory_region"

#: numpy's limit on dimensions (NPY_MAXDIMS), and the most elements an int64 can count.
MAX_DIMS = 64
MAX_ELEMENTS = 2 ** 63 - 1
#: The most elements numpy describes in one array of 8-byte items, zero-sized or not: the product of a
#: shape's dimensions other than 0 must not pass it.
NUMPY_MAX_ELEMENTS = (2 ** 63 - 1) // 8
#: The most BYTES elements one request carries in all its inputs (docs/security.md). Each element becomes a
#: Python object when a model reads it, however short it is on the wire, and is split from the next in turn:
#: the limit bounds the memory and time reading them costs. A server script may change it before it starts.
MAX_BYTES_ELEMENTS = 1 << 20

#: The longest list of JSON values ``raw_bytes`` packs itself, with struct: for a few elements (a streamed
#: token's id, a score) that is several times quicker than a numpy array made and dropped again. Longer
#: lists, and any value struct refuses, go through numpy, which names what is wrong.
PACK_MAX = 16
#: datatype -> its struct format code, little-endian as on the wire
_STRUCT_CODES = {"INT8": "b", "INT16": "h", "INT32": "i", "INT64": "q", "UINT8": "B", "UINT16": "H", "UINT32": "I",
                 "UINT64": "Q", "FP32": "f", "FP64": "d"}
#: datatype -> the packers of its lists of 0 to PACK_MAX elements (a compiled struct.Struct each: building the
#: format string per call cost more than the packing)
_PACKERS = {datatype: [struct.Struct(f"<{n}{code}").pack for n in range(PACK_MAX + 1)]
            for datatype, code in _STRUCT_CODES.items()}
#: How a list of JSON values is checked to fit a datatype without numpy: packed with struct (FP16 too, which
#: the wire packing leaves to numpy), or for BOOL and BYTES, the element types it may hold.
_CHECK_CODES = {**_STRUCT_CODES, "FP16": "e"}
_PLAIN_ELEMENTS: Dict[str, Set[type]] = {"BOOL": {bool}, "BYTES": {str, bytes}}


class DataDoesNotFit(InvalidInput):
    """JSON values a tensor's datatype cannot hold (-1 as UINT8): the client's error in a request; in an
    answer it is the model's, and the encoders of answers raise :meth:`as_model_error` instead."""

    def __init__(self, name: str, datatype: str, detail: str):
        super().__init__(f"input '{name}': data does not fit datatype {datatype}: {detail}")
        self.name, self.datatype, self.detail = name, datatype, detail

    def as_model_error(self, model_name: str) -> InferenceError:
        """The same, as the fault of the model that answered it (HTTP 500, gRPC INTERNAL)."""
        return InferenceError(f"model '{model_name}' returned output '{self.name}' whose data does not fit "
                              f"datatype {self.datatype}: {self.detail}")


def _packed(values: list, datatype: str, shape: List[int]) -> Optional[bytes]:
    """A flat list of at most PACK_MAX numbers as the raw little-endian elements of ``datatype``, or None
    when struct cannot pack it as numpy would (nested lists, a count the shape does not match, a float for
    an integer datatype, a value out of range): numpy then converts it, or says why it cannot."""
    packers = _PACKERS.get(datatype)
    if packers is None or prod(shape) != len(values):
        return None
    try:
        return packers[len(values)](*values)
    except (struct.error, TypeError, OverflowError):
        return None


def _fits_as_is(values: Any, datatype: str) -> bool:
    """Whether a list of JSON values surely fits ``datatype`` without asking numpy: a flat list of numbers
    struct packs (in range, integers for an integer datatype), of bools for BOOL, of text for BYTES. False
    means "ask numpy", which may still accept it (e.g. 1.5 as INT32, as the binary encoders do)."""
    if type(values) is not list:
        return False
    code = _CHECK_CODES.get(datatype)
    if code is not None:
        packers = _PACKERS.get(datatype)
        try:
            if packers is not None and len(values) <= PACK_MAX:
                packers[len(values)](*values)
            else:
                struct.pack(f"<{len(values)}{code}", *values)
            return True
        except (struct.error, TypeError, OverflowError):
            return False
    plain = _PLAIN_ELEMENTS.get(datatype)
    return plain is not None and set(map(type, values)) <= plain


def _nested_count(data: Union[list, tuple]) -> Optional[int]:
    """How many values regularly nested lists hold, or None when a level's lists differ in length. Counts
    lists, not values: the innermost lists' elements are not looked at."""
    count, level = len(data), data
    while level and isinstance(level[0], (list, tuple)):
        width = len(level[0])
        for row in level:
            if not isinstance(row, (list, tuple)) or len(row) != width:
                return None
        count *= width
        if not width or not isinstance(level[0][0], (list, tuple)):
            return count
        level = [item for row in level for item in row]
    return count


def _check_shape(name: str, shape: Any) -> List[int]:
    if not isinstance(shape, (list, tuple)):
        raise InvalidInput(f"input '{name}': shape must be a list of integers, got {_short(shape)}")
    for d in shape:  # a loop, not all()/any() over generators: shapes are short and this runs per tensor
        if type(d) is not int:
            raise InvalidInput(f"input '{name}': shape must be a list of integers, got {_short(shape)}")
        if d < 0:
            raise InvalidInput(f"input '{name}': shape {_short(list(shape))} has a negative dimension")
    if len(shape) > MAX_DIMS:
        raise InvalidInput(f"input '{name}': shape has {len(shape)} dimensions; at most {MAX_DIMS} are supported")
    count = prod(shape)
    if count > MAX_ELEMENTS:
        raise InvalidInput(f"input '{name}': shape {list(shape)} has more elements than an int64 can count")
    if not count and prod(d for d in shape if d) > NUMPY_MAX_ELEMENTS:  # e.g. [0, 2**62]: no array has it
        raise InvalidInput(f"shape {list(shape)} of input '{name}' is too large: its dimensions other than 0 "
                           f"multiply to more than {NUMPY_MAX_ELEMENTS}, the most a numpy array holds")
    return shape if type(shape) is list else list(shape)


def _short(value: Any, limit: int = 200) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


class Tensor:
    """What :class:`InferInput` and :class:`InferOutput` share: name, shape, datatype, data, parameters."""

    def __init__(
        self,
        name: str,
        shape: List[int],
        datatype: str,
        data: Union[List, np.ndarray, None] = None,
        parameters: Optional[Dict] = None,
    ):
        self._name = name
        self._shape = list(shape)
        self._datatype = datatype.upper()
        self._parameters = parameters
        self._data = None
        self._array: Optional[np.ndarray] = None
        self._raw_data: Union[bytes, memoryview, None] = None
        self._binary = False
        if isinstance(data, np.ndarray):
            self._array = data
        else:
            self._data = data

    # --- attributes -------------------------------------------------------------------------------
    @property
    def name(self) -> str:
        """The tensor's name."""
        return self._name

    @property
    def datatype(self) -> str:
        """The v2 datatype, e.g. ``"FP32"`` or ``"BYTES"``."""
        return self._datatype

    @property
    def shape(self) -> List[int]:
        """The tensor's shape as a list of ints."""
        return self._shape

    @shape.setter
    def shape(self, shape: List[int]) -> None:
        self._shape = list(shape)

    @property
    def parameters(self) -> Optional[Dict]:
        """The tensor's parameters (a dict), or None."""
        return self._parameters

    @parameters.setter
    def parameters(self, params: Optional[Dict]) -> None:
        self._parameters = params

    @property
    def data(self) -> Optional[List]:
        """The content as JSON values (a flat or nested list). For binary content this is computed on demand."""
        if self._data is not None:
            return self._data
        if self._array is not None and not self._binary:
            return self._json_values()
        if self._raw_data is not None and not self._binary:
            return self._json_values()
        return None

    @data.setter
    def data(self, data: Union[List, np.ndarray]) -> None:
        self._data, self._array, self._raw_data = None, None, None
        if isinstance(data, np.ndarray):
            self._array = data
        else:
            self._data = data

    @property
    def binary_data(self) -> bool:
        """True when this tensor is to be sent as raw bytes (set by ``set_data_from_numpy``)."""
        return self._binary

    # --- reading --------------------------------------------------------------------------------------
    def as_numpy(self) -> np.ndarray:
        """The content as a numpy array of the tensor's shape.

        Raw wire content is returned as a read-only view on the request bytes (no copy).
        Raises InvalidInput when the content does not fit the shape or datatype.
        """
        if self._array is not None:
            return self._array
        dtype = np_dtype_of(self._datatype)
        if dtype is None:
            raise InvalidInput(f"input '{self._name}': invalid datatype {self._datatype}")
        count = prod(self._shape)
        if self._raw_data is not None:
            if self._datatype == "BYTES":
                flat = deserialize_bytes_tensor(self._raw_data, count, self._name)
            else:
                expected = count * dtype.itemsize
                if len(self._raw_data) != expected:
                    raise InvalidInput(
                        f"input '{self._name}': {len(self._raw_data)} bytes of {self._datatype} data given "
                        f"but shape {self._shape} needs {expected}"
                    )
                flat = np.frombuffer(self._raw_data, dtype=dtype)
        elif self._data is not None:
            flat = self._array_from_json(dtype)
            if flat.size != count:
                raise InvalidInput(
                    f"input '{self._name}': {flat.size} values given but shape {self._shape} needs {count}"
                )
        else:
            raise InvalidInput(f"'data' field is missing for tensor '{self._name}'")
        self._array = flat.reshape(self._shape)
        return self._array

    def _array_from_json(self, dtype: np.dtype) -> np.ndarray:
        try:
            if self._datatype == "BYTES":
                values = _flat_values(self._data)
                flat = np.empty(len(values), dtype=np.object_)
                flat[:] = values
                return flat
            return np.asarray(self._data, dtype=dtype).reshape(-1)
        except (ValueError, TypeError, OverflowError) as e:
            raise DataDoesNotFit(self._name, self._datatype, str(e)) from None

    def as_string(self) -> List[str]:
        """The elements of a BYTES tensor decoded as UTF-8 text, in C order (InvalidInput if one is not UTF-8)."""
        if self._datatype != "BYTES":
            raise InvalidInput(f"invalid datatype {self._datatype} in the input")
        out = []
        try:
            for item in self.as_numpy().reshape(-1):
                out.append(item.decode("utf-8") if isinstance(item, (bytes, bytearray)) else str(item))
        except UnicodeDecodeError as e:
            raise InvalidInput(f"input '{self._name}': element {len(out)} is not UTF-8 text ({e.reason} at byte "
                               f"{e.start})") from None
        return out

    def _json_values(self) -> List:
        arr = self.as_numpy()
        if self._datatype == "BYTES":
            return _bytes_as_text(arr, self._name)
        return arr.reshape(-1).tolist()

    # --- writing --------------------------------------------------------------------------------------
    def set_data_from_numpy(self, tensor: np.ndarray, binary_data: bool = True) -> None:
        """Set the content from a numpy array; ``binary_data`` sends it as raw bytes instead of JSON.

        Raises InferenceError when the array's dtype or shape differs from the tensor's.
        """
        if not isinstance(tensor, np.ndarray):
            raise InferenceError("input_tensor must be a numpy array")
        got = datatype_of(tensor.dtype)
        if got != self._datatype and not (self._datatype == "BF16" and tensor.dtype == np.uint16):
            raise InferenceError(f"got unexpected datatype {got} from numpy array, expected {self._datatype}")
        if list(tensor.shape) != self._shape:
            raise InferenceError(
                f"got unexpected numpy array shape [{str(tensor.shape)[1:-1]}], expected [{str(self._shape)[1:-1]}]"
            )
        self._array, self._data, self._raw_data = tensor, None, None
        self._binary = bool(binary_data)
        if self._parameters:
            self._parameters.pop("binary_data_size", None)

    def raw_bytes(self) -> Union[bytes, memoryview]:
        """The content in wire form (raw little-endian elements, or length-prefixed BYTES)."""
        if self._raw_data is not None:
            return self._raw_data
        data = self._data
        if type(data) is list and len(data) <= PACK_MAX and self._array is None:
            packed = _packed(data, self._datatype, self._shape)
            if packed is not None:
                return packed
        arr = self.as_numpy()
        if self._datatype == "BYTES":
            return serialize_bytes_tensor(arr)
        wire = np_dtype_of(self._datatype)
        # e.g. float64 data in an FP32 tensor: send what the datatype promises
        if wire is not None and arr.dtype != wire and self._datatype != "BF16":
            try:
                arr = arr.astype(wire)
            except (TypeError, ValueError) as e:
                raise InferenceError(f"tensor '{self._name}': {arr.dtype} data cannot be sent as "
                                     f"{self._datatype}: {e}") from None
        return np.ascontiguousarray(arr).reshape(-1).data.cast("B")

    def content_problem(self) -> Optional[str]:
        """What is wrong with this tensor's shape, datatype or data (an output a model built), or None.

        Cheap: counts, not values (nested JSON lists are checked on their first dimension only).
        """
        if self._datatype not in DATATYPES:
            return f"datatype {self._datatype!r} is not a v2 datatype"
        shape = self._shape
        for d in shape:
            if type(d) is not int or d < 0:
                return f"shape {_short(shape)} is not a list of non-negative integers"
        count = prod(shape)
        if self._array is not None:
            if not isinstance(self._array, np.ndarray):
                return f"its data is a {type(self._array).__name__}, not a numpy array"
            if self._array.size != count:
                return f"shape {shape} needs {count} values but the data has {self._array.size}"
        elif self._data is not None:
            data = self._data
            if not isinstance(data, (list, tuple)):
                return f"its data is a {type(data).__name__}, not a list or numpy array"
            if data and isinstance(data[0], (list, tuple)):
                if not shape or len(data) != shape[0]:
                    return f"shape {shape} does not match the nesting of its data ({len(data)} rows)"
                values = _nested_count(data)
                if values is None:
                    return f"its data's nested lists differ in length, which shape {shape} cannot describe"
                if values != count:
                    return f"shape {shape} needs {count} values but the data has {values}"
            elif len(data) != count:
                return f"shape {shape} needs {count} values but the data has {len(data)}"
        elif self._raw_data is not None:
            expected = expected_nbytes(self._datatype, shape)
            if expected >= 0 and len(self._raw_data) != expected:
                return (f"shape {shape} of {self._datatype} needs {expected} bytes "
                        f"but the data has {len(self._raw_data)}")
        else:
            return "it has no data"
        return None

    def json_data(self) -> Any:
        """The content for a JSON body: a flat numpy array orjson writes natively, or a list.

        A list is sent as it is, once its values are known to fit the datatype as the binary encoders would
        have them; raises DataDoesNotFit when numpy cannot convert them (-1 as UINT8, a ragged list).
        """
        if self._data is not None:
            if not _fits_as_is(self._data, self._datatype):
                dtype = NP_DTYPES.get(self._datatype)  # BF16 has none: its JSON values are not bit patterns
                if dtype is not None:
                    self._array_from_json(dtype)
            return self._data
        arr = self.as_numpy()
        if self._datatype == "BYTES":
            return _bytes_as_text(arr, self._name)
        if arr.dtype.kind == "V" or not arr.dtype.isnative:
            return arr.reshape(-1).tolist()
        return np.ascontiguousarray(arr).reshape(-1)

    def to_dict(self) -> Dict:
        """The tensor as a v2 JSON object."""
        out: Dict[str, Any] = {"name": self._name, "shape": self._shape, "datatype": self._datatype}
        if self._parameters:
            out["parameters"] = self._parameters
        out["data"] = self.data
        return out

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Tensor) or type(other) is not type(self):
            return False
        if (self.name, self.shape, self.datatype) != (other.name, other.shape, other.datatype):
            return False
        return _same_values(self, other)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self._name!r}, shape={self._shape}, datatype={self._datatype!r})"


def _same_values(a: Tensor, b: Tensor) -> bool:
    try:
        return bool(np.array_equal(a.as_numpy(), b.as_numpy()))
    except InvalidInput:
        return a._data == b._data


def _flat_values(data: Any) -> list:
    """The values of nested lists in order, one level of nesting at a time (no recursion: a client may
    nest deeper than Python recurses); ValueError past MAX_DIMS levels, TypeError for a JSON object."""
    level = data if isinstance(data, (list, tuple)) else [data]
    for _ in range(MAX_DIMS):
        if not any(issubclass(kind, (list, tuple, dict)) for kind in set(map(type, level))):
            return level if type(level) is list else list(level)
        flat: list = []
        for v in level:
            if isinstance(v, (list, tuple)):
                flat.extend(v)
            elif isinstance(v, dict):
                raise TypeError("a BYTES element is a JSON object, not text")
            else:
                flat.append(v)
        level = flat
    raise ValueError(f"its lists nest more than {MAX_DIMS} levels deep, deeper than any shape")


def _bytes_as_text(arr: np.ndarray, name: str) -> List[str]:
    out = []
    for item in arr.reshape(-1):
        if isinstance(item, (bytes, bytearray, np.bytes_)):
            try:
                out.append(bytes(item).decode("utf-8"))
            except UnicodeDecodeError:
                raise InvalidInput(
                    f"tensor '{name}' holds bytes that are not UTF-8 text; request it with binary_data"
                ) from None
        else:
            out.append(str(item))
    return out


def check_tensor_header(name: Any, shape: Any, datatype: Any) -> List[int]:
    """Validate a decoded tensor's name, shape and datatype; return the shape. Raises InvalidInput."""
    if not isinstance(name, str):
        raise InvalidInput(f"tensor name must be a string, got {name!r}")
    shape = _check_shape(name, shape)
    if not isinstance(datatype, str) or datatype.upper() not in DATATYPES:
        raise InvalidInput(f"input '{name}': unsupported datatype {datatype!r}")
    return shape


def check_bytes_elements(tensors: Sequence[Tensor]) -> None:
    """Refuse (InvalidInput) a request whose BYTES inputs hold more than MAX_BYTES_ELEMENTS elements in
    all, by their shapes, before any is read."""
    total = 0
    for tensor in tensors:
        if tensor._datatype == "BYTES":
            total += prod(tensor._shape)
    if total > MAX_BYTES_ELEMENTS:
        raise InvalidInput(f"the request's BYTES inputs hold {total} elements in all; a request may carry at most "
                           f"{MAX_BYTES_ELEMENTS}")


def in_shared_memory(tensor: Any) -> bool:
    """Whether a tensor's (or a requested output's) content lives in a shared-memory region, so it carries
    no data on the wire."""
    params = tensor.parameters
    return bool(params) and SHM_REGION in params


_ELEMENT_BYTES = {name: element_size(name) for name in DATATYPES}


def expected_nbytes(datatype: str, shape: List[int]) -> int:
    """Bytes a fixed-size tensor of this shape takes; -1 for BYTES (variable size)."""
    size = _ELEMENT_BYTES.get(datatype)
    if size is None:  # e.g. a lowercase spelling
        size = element_size(datatype.upper())
    return -1 if size == 0 else size * prod(shape)
