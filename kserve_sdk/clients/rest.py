"""An async v1/v2 REST client with pooled keep-alive connections (KServe's ``InferenceRESTClient``)."""
import asyncio
from typing import Any, Dict, Optional, Union

import aiohttp
import orjson

from ..errors import UpstreamError
from ..protocol.infer_type import InferRequest, InferResponse
from ..protocol.rest_codec import dumps, encode_infer_request
from .mismatch import ProtocolMismatch, is_http2_answer

BINARY_HEADER = "Inference-Header-Content-Length"


class RESTConfig:
    """Settings of an :class:`InferenceRESTClient` (KServe's names).

    Args:
        protocol: "v1" or "v2": which routes ``infer`` calls.
        retries: extra attempts when the server cannot be reached (connection errors only).
        timeout: seconds for one call.
        verify: verify TLS certificates (or a CA bundle path).
    """

    def __init__(self, transport: Any = None, protocol: str = "v1", retries: int = 3, http2: bool = False,
                 timeout: float = 60, cert: Any = None, verify: Union[bool, str] = True, auth: Any = None,
                 verbose: bool = False):
        self.protocol = protocol.lower() if isinstance(protocol, str) else protocol.value
        self.retries = retries
        self.timeout = timeout
        self.verify = verify
        self.cert = cert
        self.auth = auth
        self.verbose = verbose


class InferenceRESTClient:
    """Calls KServe v1 / Open Inference Protocol v2 REST servers over one pooled connection set."""

    def __init__(self, config: Optional[RESTConfig] = None):
        self._config = config or RESTConfig()
        self._session: Optional[aiohttp.ClientSession] = None

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            ssl = None if self._config.verify is True else False if self._config.verify is False else None
            connector = aiohttp.TCPConnector(limit=0, ssl=ssl)
            self._session = aiohttp.ClientSession(
                connector=connector, timeout=aiohttp.ClientTimeout(total=self._config.timeout),
                json_serialize=lambda o: dumps(o).decode())
        return self._session

    async def _request(self, method: str, url: str, body: Optional[bytes] = None,
                       headers: Optional[Dict[str, str]] = None, timeout: Optional[float] = None):
        """One call with retries on connection failures; returns (status, headers, body bytes)."""
        attempts = 1 + max(0, self._config.retries)
        kwargs = {"timeout": aiohttp.ClientTimeout(total=timeout)} if timeout else {}
        for attempt in range(attempts):
            try:
                async with self._client().request(method, url, data=body, headers=headers, **kwargs) as resp:
                    return resp.status, resp.headers, await resp.read()
            except aiohttp.ClientConnectionError as e:
                if attempt + 1 == attempts:
                    raise UpstreamError(503, f"cannot reach {url}: {e}") from None
                await asyncio.sleep(min(0.05 * 2 ** attempt, 1.0))
            except TimeoutError:
                raise UpstreamError(504, f"{url} did not answer within the timeout") from None
            except aiohttp.ClientResponseError as e:  # an answer that is not HTTP/1.1
                if is_http2_answer(e.message):
                    target = e.request_info.url
                    raise ProtocolMismatch(str(target.origin()), f"{self._config.protocol} REST", "grpc",
                                           f"{method} {target.raw_path} was answered with an HTTP/2 SETTINGS frame"
                                           ) from None
                raise

    @staticmethod
    def _raise_for_status(url: str, status: int, body: bytes) -> None:
        if status < 400:
            return
        raise UpstreamError(status, f"{url} answered {status}: {_error_text(body)}")

    async def _raise_if_other_protocol(self, base_url: str, model_name: Optional[str], url: str,
                                       answer: bytes, timeout: Optional[float]) -> None:
        """After the infer route answered 404: ProtocolMismatch when the other REST protocol's route of the
        same model answers 200 (the server speaks that one); nothing otherwise (e.g. no such model)."""
        other = "v1" if self._config.protocol == "v2" else "v2"
        path = f"/v1/models/{model_name}" if other == "v1" else f"/v2/models/{model_name}/ready"
        try:
            status, _, _ = await self._request("GET", base_url + path, None, None, timeout)
        except (UpstreamError, aiohttp.ClientError):
            return
        if status == 200:
            raise ProtocolMismatch(base_url, f"{self._config.protocol} REST", other,
                                   f"POST {url[len(base_url):]} answered 404 ({_error_text(answer)}) while "
                                   f"GET {path} answers 200")

    async def infer(self, base_url: str, data: Union[Dict, InferRequest], model_name: Optional[str] = None,
                    headers: Optional[Dict[str, str]] = None, response_headers: Optional[Dict[str, str]] = None,
                    is_graph_endpoint: bool = False, timeout: Optional[float] = None) -> Union[Dict, InferResponse]:
        """Run inference on ``model_name`` at ``base_url``: a dict for v1, an InferResponse for v2."""
        base_url = base_url.rstrip("/")
        headers = dict(headers or {})
        v2 = self._config.protocol == "v2"
        if is_graph_endpoint:
            url = base_url
        elif v2:
            url = f"{base_url}/v2/models/{model_name}/infer"
        else:
            url = f"{base_url}/v1/models/{model_name}:predict"
        if isinstance(data, InferRequest):
            body, json_length = encode_infer_request(data)
            if json_length is not None:
                headers[BINARY_HEADER] = str(json_length)
        else:
            body = data if isinstance(data, bytes) else dumps(data)
        headers.setdefault("Content-Type", "application/json")
        status, resp_headers, payload = await self._request("POST", url, body, headers, timeout)
        if status == 404 and not is_graph_endpoint:
            await self._raise_if_other_protocol(base_url, model_name, url, payload, timeout)
        self._raise_for_status(url, status, payload)
        if not v2:
            return orjson.loads(payload)
        json_length = resp_headers.get(BINARY_HEADER)
        if json_length is not None:
            return InferResponse.from_bytes(payload, int(json_length))
        return InferResponse.from_rest(orjson.loads(payload))

    async def explain(self, base_url: str, model_name: str, data: Dict, headers: Optional[Dict[str, str]] = None,
                      timeout: Optional[float] = None) -> Dict:
        """Call ``:explain`` on a v1 server."""
        url = f"{base_url.rstrip('/')}/v1/models/{model_name}:explain"
        status, _, payload = await self._request("POST", url, dumps(data), headers, timeout)
        self._raise_for_status(url, status, payload)
        return orjson.loads(payload)

    async def _ok(self, url: str, headers: Optional[Dict[str, str]], timeout: Optional[float]) -> bool:
        status, _, _ = await self._request("GET", url, None, headers, timeout)
        return status == 200

    async def is_server_ready(self, base_url: str, headers: Optional[Dict[str, str]] = None,
                              timeout: Optional[float] = None) -> bool:
        """Whether the server is ready (v2 ``/v2/health/ready``; v1 ``/``)."""
        path = "/v2/health/ready" if self._config.protocol == "v2" else "/"
        return await self._ok(base_url.rstrip("/") + path, headers, timeout)

    async def is_server_live(self, base_url: str, headers: Optional[Dict[str, str]] = None,
                             timeout: Optional[float] = None) -> bool:
        """Whether the server is live (v2 ``/v2/health/live``; v1 ``/``)."""
        path = "/v2/health/live" if self._config.protocol == "v2" else "/"
        return await self._ok(base_url.rstrip("/") + path, headers, timeout)

    async def is_model_ready(self, base_url: str, model_name: str, headers: Optional[Dict[str, str]] = None,
                             timeout: Optional[float] = None) -> bool:
        """Whether ``model_name`` is ready."""
        path = f"/v2/models/{model_name}/ready" if self._config.protocol == "v2" else f"/v1/models/{model_name}"
        return await self._ok(base_url.rstrip("/") + path, headers, timeout)

    async def close(self) -> None:
        """Close the pooled connections."""
        if self._session is not None:
            await self._session.close()
            self._session = None


def _error_text(body: bytes) -> str:
    """The message of an error answer: its JSON ``error``, else its text."""
    try:
        return str(orjson.loads(body).get("error") or body.decode(errors="replace"))
    except (orjson.JSONDecodeError, AttributeError):
        return body.decode(errors="replace")
