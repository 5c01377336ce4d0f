"""curl-equivalent raw HTTP for tests: exact bytes in, status, headers and bytes out."""
import http.client
import json
from typing import Dict, Optional, Tuple


def request(port: int, method: str, path: str, body: Optional[bytes] = None,
            headers: Optional[Dict[str, str]] = None, timeout: float = 30.0) -> Tuple[int, Dict[str, str], bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        resp = conn.getresponse()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()
    finally:
        conn.close()


def post_json(port: int, path: str, doc, headers: Optional[Dict[str, str]] = None):
    """POST a JSON document; returns (status, headers, parsed JSON body)."""
    status, hdrs, body = request(port, "POST", path, json.dumps(doc).encode(),
                                 {"Content-Type": "application/json", **(headers or {})})
    return status, hdrs, json.loads(body)


def binary_body(header: dict, *tensors: bytes) -> Tuple[bytes, Dict[str, str]]:
    """A v2 body with the binary-data extension, and the header naming the JSON part's length."""
    head = json.dumps(header).encode()
    return head + b"".join(tensors), {"Inference-Header-Content-Length": str(len(head))}
