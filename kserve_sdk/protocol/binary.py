"""Binary tensor codecs: BYTES elements with 4-byte little-endian length prefixes, and the REST
binary-data extension layout (a JSON header followed by each tensor's raw bytes)."""
import struct
from typing import List, Optional, Union

import numpy as np

from ..errors import InvalidInput

_LEN = struct.Struct("<I")


def serialize_bytes_tensor(array: np.ndarray) -> bytes:
    """Encode each element (bytes, or anything else as its UTF-8 text) as length + bytes, C order."""
    parts: List[bytes] = []
    for item in array.reshape(-1):
        if isinstance(item, np.ndarray):
            item = item.item()
        if isinstance(item, (bytes, bytearray, memoryview)):
            b = bytes(item)
        elif isinstance(item, np.bytes_):
            b = bytes(item)
        else:
            b = str(item).encode("utf-8")
        parts.append(_LEN.pack(len(b)))
        parts.append(b)
    return b"".join(parts)


def deserialize_bytes_tensor(buffer: Union[bytes, memoryview], count: int = -1, name: str = "") -> np.ndarray:
    """Decode length-prefixed elements into a 1-D object array of bytes.

    ``count`` (when >= 0) is the number of elements the shape promises; a prefix that points past the
    buffer, or a count that disagrees, is the client's error and raises InvalidInput. Decoding stops at
    the first element past ``count``.
    """
    data = buffer if type(buffer) is bytes else memoryview(buffer).cast("B")
    items = _equal_lengths(data, count) if count >= SPLIT_BY_NUMPY_FROM else None
    if items is None:
        if type(data) is not bytes and (count < 0 or count >= SPLIT_BY_NUMPY_FROM):
            data = bytes(data)  # for many elements, slices of bytes cost less than copies of memoryview slices
        items = _split(data, count, name)
    if count >= 0 and len(items) != count:
        given = len(items) if len(items) < count else f"more than {count}"
        raise InvalidInput(f"input '{name}': {given} BYTES elements given but the shape needs {count}")
    out = np.empty(len(items), dtype=np.object_)
    out[:] = items
    return out


#: From this many elements on, elements that all have one length are cut out by numpy rather than one
#: at a time (for fewer, numpy's set-up costs more than it saves).
SPLIT_BY_NUMPY_FROM = 64


def _split(data: Union[bytes, memoryview], count: int, name: str) -> List[bytes]:
    """The elements, one at a time; no more than ``count + 1`` when ``count`` >= 0."""
    total, pos, start, unpack = len(data), 0, 0, _LEN.unpack_from
    cut = data.__getitem__ if type(data) is bytes else lambda part: bytes(data[part])
    items: List[bytes] = []
    append = items.append
    try:
        for _ in range(count + 1 if count >= 0 else total // 4 + 1):  # each element takes 4 bytes at least
            if pos >= total:
                break
            start = pos + 4
            pos = start + unpack(data, pos)[0]
            append(cut(slice(start, pos)))
    except struct.error:
        raise InvalidInput(f"input '{name}': BYTES element at offset {pos} has a truncated length prefix") from None
    if pos > total:  # the last element, which ends the loop
        raise InvalidInput(f"input '{name}': BYTES element length {pos - start} at offset {start - 4} runs past the "
                           "end of the data")
    return items


def _equal_lengths(data: Union[bytes, memoryview], count: int) -> Optional[List[bytes]]:
    """The ``count`` elements, cut out by numpy, when the data is exactly ``count`` elements of the first
    one's length; None otherwise."""
    if len(data) < 4:
        return None
    n = _LEN.unpack_from(data, 0)[0]
    stride = n + 4
    if stride * count != len(data):
        return None
    lengths = np.ndarray((count,), dtype="<u4", buffer=data, strides=(stride,))
    if not (lengths == n).all():
        return None
    if n == 0:
        return [b""] * count
    rows = np.frombuffer(data, dtype=np.uint8).reshape(count, stride)[:, 4:]
    return np.ascontiguousarray(rows).view(f"V{n}").reshape(-1).tolist()
