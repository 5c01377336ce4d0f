"""Binary tensor codecs: BYTES elements with 4-byte little-endian length prefixes, and the REST
binary-data extension layout (a JSON header followed by each tensor's raw bytes)."""
import struct
from typing import List, Union

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
    buffer, or a count that disagrees, is the client's error and raises InvalidInput.
    """
    view = memoryview(buffer).cast("B")
    total = len(view)
    items: List[bytes] = []
    pos = 0
    while pos < total:
        if pos + 4 > total:
            raise InvalidInput(f"input '{name}': BYTES element at offset {pos} has a truncated length prefix")
        (n,) = _LEN.unpack_from(view, pos)
        pos += 4
        if pos + n > total:
            raise InvalidInput(
                f"input '{name}': BYTES element length {n} at offset {pos - 4} runs past the end of the data"
            )
        items.append(bytes(view[pos:pos + n]))
        pos += n
    if count >= 0 and len(items) != count:
        raise InvalidInput(f"input '{name}': {len(items)} BYTES elements given but the shape needs {count}")
    out = np.empty(len(items), dtype=np.object_)
    out[:] = items
    return out
