"""An async v1/v2 REST client with pooled keep-alive connections (KServe's ``InferenceRESTClient``).

It takes what KServe's takes (``base_url`` as a string or an ``httpx.URL``, httpx-style timeouts, a
``response_headers`` dict to fill) and raises what KServe's raises: an error answer is an ``UpstreamError``
that is also ``httpx.HTTPStatusError`` when httpx is installed (:mod:`.http_errors`).
"""
import asyncio
from typing import Any, Dict, Mapping, NamedTuple, Optional, Tuple, Union

import aiohttp
import orjson

from ..errors import UnsupportedProtocol, UpstreamError
from ..protocol.infer_type import InferRequest, InferResponse
from ..protocol.rest_codec import dumps, encode_infer_request
from .defaults import USE_CLIENT_DEFAULT, is_client_default
from .http_errors import Answer, attach_exchange, kserve_type
from .mismatch import ProtocolMismatch, is_http2_answer
from .rest_config import RESTConfig, auth_headers, client_timeout, ssl_setting

__all__ = ["InferenceRESTClient", "RESTConfig", "BINARY_HEADER"]

BINARY_HEADER = "Inference-Header-Content-Length"
JSON, OCTET_STREAM = "application/json", "application/octet-stream"


class _Sent(NamedTuple):
    """A request as the client sent it (what an error's ``.request`` is made of)."""
    method: str
    url: str
    body: Optional[bytes] = None
    headers: Optional[Mapping[str, str]] = None


def _error(ours: type, httpx_name: str, args: tuple, sent: _Sent, answer: Optional[Answer] = None) -> Exception:
    """``ours(*args)``, also of httpx's type ``httpx_name`` with its request (and response) when httpx is there."""
    return attach_exchange(kserve_type(ours, httpx_name)(*args), *sent, answer=answer)


class InferenceRESTClient:
    """Calls KServe v1 / Open Inference Protocol v2 REST servers over one pooled connection set.

    Errors: an answer that is not 2xx raises ``UpstreamError`` + ``httpx.HTTPStatusError`` (its ``.response``
    holds the answer); a server it cannot reach ``UpstreamError`` + ``httpx.ConnectError`` (503); one too slow
    ``UpstreamError`` + ``httpx.ReadTimeout`` (504). Without httpx installed they are ``UpstreamError`` alone.
    """

    def __init__(self, config: Optional[RESTConfig] = None):
        self._config = config or RESTConfig()
        self._session: Optional[aiohttp.ClientSession] = None

    async def __aenter__(self) -> "InferenceRESTClient":
        return self

    async def __aexit__(self, *exc_info) -> None:
        await self.close()

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            config = self._config
            connector = aiohttp.TCPConnector(limit=0, ssl=ssl_setting(config.verify, config.cert))
            self._session = aiohttp.ClientSession(connector=connector, timeout=client_timeout(config.timeout),
                                                  headers=auth_headers(config.auth))
        return self._session

    async def _request(self, sent: _Sent, timeout: Any) -> Answer:
        """One call; one that could not reach the server is made again, up to ``retries`` times."""
        kwargs: Dict[str, Any] = {} if is_client_default(timeout) else {"timeout": client_timeout(timeout)}
        unreached: Exception
        attempts = 1 + max(0, self._config.retries)
        for attempt in range(attempts):
            try:
                async with self._client().request(sent.method, sent.url, data=sent.body, headers=sent.headers,
                                                  allow_redirects=False, **kwargs) as resp:
                    return resp.status, resp.headers, await resp.read()
            except aiohttp.ConnectionTimeoutError as e:
                unreached, kind = e, "ConnectTimeout"
            except TimeoutError:
                raise _error(UpstreamError, "ReadTimeout", (504, f"{sent.url} did not answer within the timeout"),
                             sent) from None
            except aiohttp.ClientConnectionError as e:
                unreached, kind = e, "ConnectError"
            except aiohttp.ClientResponseError as e:  # an answer that is not HTTP/1.1
                if not is_http2_answer(e.message):
                    raise
                target = e.request_info.url
                mismatch = (str(target.origin()), f"{self._config.protocol} REST", "grpc",
                            f"{sent.method} {target.raw_path} was answered with an HTTP/2 SETTINGS frame")
                raise _error(ProtocolMismatch, "RemoteProtocolError", mismatch, sent) from None
            if attempt + 1 < attempts:
                await asyncio.sleep(min(0.05 * 2 ** attempt, 1.0))
        raise _error(UpstreamError, kind, (503, f"cannot reach {sent.url}: {unreached}"), sent)

    @staticmethod
    def _raise_for_status(sent: _Sent, answer: Answer) -> None:
        status, _, payload = answer
        if 200 <= status < 300:
            return
        reason = f"{sent.url} answered {status}: {_error_text(payload)}"
        raise _error(UpstreamError, "HTTPStatusError", (status, reason), sent, answer)

    async def _raise_if_other_protocol(self, base_url: str, model_name: str, sent: _Sent, answer: Answer,
                                       timeout: Any) -> None:
        """After the infer route answered 404: ProtocolMismatch when the other REST protocol's route of the
        same model answers 200 (the server speaks that one); nothing otherwise (e.g. no such model)."""
        other = "v1" if self._config.protocol == "v2" else "v2"
        path = f"/v1/models/{model_name}" if other == "v1" else f"/v2/models/{model_name}/ready"
        try:
            status, _, _ = await self._request(_Sent("GET", base_url + path), timeout)
        except (UpstreamError, aiohttp.ClientError):
            return
        if status == 200:
            mismatch = (base_url, f"{self._config.protocol} REST", other,
                        f"POST {sent.url[len(base_url):]} answered 404 ({_error_text(answer[2])}) while "
                        f"GET {path} answers 200")
            raise _error(ProtocolMismatch, "HTTPStatusError", mismatch, sent, answer)

    def _url(self, base_url: Any, v1_path: str, v2_path: str) -> str:
        """The URL of the route of the client's protocol under ``base_url`` (a string or an ``httpx.URL``)."""
        if self._config.protocol == "v2":
            return str(base_url).rstrip("/") + v2_path
        if self._config.protocol == "v1":
            return str(base_url).rstrip("/") + v1_path
        raise UnsupportedProtocol(self._config.protocol)

    async def infer(self, base_url: Any, data: Union[Dict, InferRequest, bytes], model_name: Optional[str] = None,
                    headers: Optional[Mapping[str, str]] = None, response_headers: Optional[Dict[str, str]] = None,
                    is_graph_endpoint: bool = False, timeout: Any = USE_CLIENT_DEFAULT) -> Union[Dict, InferResponse]:
        """Run inference on ``model_name`` at ``base_url``: a dict for v1 (and for an inference graph, whose
        ``base_url`` is its whole URL), an InferResponse for v2. ``response_headers``, when given, gets the
        answer's headers (lower-case names). ``timeout``: seconds, None for none, or an ``httpx.Timeout``."""
        if is_graph_endpoint:
            url = str(base_url)
        elif model_name is None:
            raise ValueError("model_name should not be 'None'")
        else:
            url = self._url(base_url, f"/v1/models/{model_name}:predict", f"/v2/models/{model_name}/infer")
        headers = dict(headers) if headers else {}
        if isinstance(data, InferRequest):
            body, json_length = encode_infer_request(data)
            if json_length is not None:
                headers[BINARY_HEADER] = str(json_length)
                _set_content_type(headers, OCTET_STREAM, replace=True)
        else:
            body = data if isinstance(data, bytes) else dumps(data)
        _set_content_type(headers, JSON, replace=False)
        sent = _Sent("POST", url, body, headers)
        answer = await self._request(sent, timeout)
        status, answer_headers, payload = answer
        if status == 404 and not is_graph_endpoint:
            await self._raise_if_other_protocol(str(base_url).rstrip("/"), str(model_name), sent, answer, timeout)
        self._raise_for_status(sent, answer)
        if response_headers is not None:
            response_headers.update(_as_httpx_gives_them(answer_headers))
        if is_graph_endpoint or self._config.protocol == "v1":
            return orjson.loads(payload)
        answer_json_length = answer_headers.get(BINARY_HEADER)
        if answer_json_length is not None:
            return InferResponse.from_bytes(payload, int(answer_json_length))
        return InferResponse.from_rest(orjson.loads(payload))

    async def explain(self, base_url: Any, model_name: str, data: Dict, headers: Optional[Mapping[str, str]] = None,
                      timeout: Any = USE_CLIENT_DEFAULT) -> Dict:
        """Call ``:explain`` on a v1 server (a v2 client raises UnsupportedProtocol, as KServe's does)."""
        if self._config.protocol != "v1":
            raise UnsupportedProtocol(self._config.protocol)
        headers = dict(headers) if headers else {}
        _set_content_type(headers, JSON, replace=False)
        sent = _Sent("POST", self._url(base_url, f"/v1/models/{model_name}:explain", ""), dumps(data), headers)
        answer = await self._request(sent, timeout)
        self._raise_for_status(sent, answer)
        return orjson.loads(answer[2])

    async def _get(self, url: str, headers: Optional[Mapping[str, str]], timeout: Any) -> Tuple[_Sent, Answer]:
        sent = _Sent("GET", url, None, headers)
        return sent, await self._request(sent, timeout)

    async def is_server_ready(self, base_url: Any, headers: Optional[Mapping[str, str]] = None,
                              timeout: Any = USE_CLIENT_DEFAULT) -> bool:
        """Whether the server is ready (v2 ``/v2/health/ready``; v1 has no such route: UnsupportedProtocol)."""
        if self._config.protocol != "v2":
            raise UnsupportedProtocol(self._config.protocol)
        sent, answer = await self._get(self._url(base_url, "", "/v2/health/ready"), headers, timeout)
        self._raise_for_status(sent, answer)
        return orjson.loads(answer[2]).get("ready")

    async def is_server_live(self, base_url: Any, headers: Optional[Mapping[str, str]] = None,
                             timeout: Any = USE_CLIENT_DEFAULT) -> bool:
        """Whether the server is live (v2 ``/v2/health/live``; v1 ``/`` answering ``"status": "alive"``)."""
        sent, answer = await self._get(self._url(base_url, "/", "/v2/health/live"), headers, timeout)
        self._raise_for_status(sent, answer)
        document = orjson.loads(answer[2])
        if self._config.protocol == "v1":
            return str(document.get("status", "")).lower() == "alive"
        return document.get("live")

    async def is_model_ready(self, base_url: Any, model_name: str, headers: Optional[Mapping[str, str]] = None,
                             timeout: Any = USE_CLIENT_DEFAULT) -> bool:
        """Whether ``model_name`` is ready. v2: whether its ready route answers 2xx. v1: its ``ready`` field;
        False on a 503, and another error answer (404 for a model the server does not have) is raised."""
        url = self._url(base_url, f"/v1/models/{model_name}", f"/v2/models/{model_name}/ready")
        sent, answer = await self._get(url, headers, timeout)
        if self._config.protocol == "v2":
            return 200 <= answer[0] < 300
        if answer[0] == 503:
            return False
        self._raise_for_status(sent, answer)
        return orjson.loads(answer[2]).get("ready")

    async def close(self) -> None:
        """Close the pooled connections."""
        if self._session is not None:
            await self._session.close()
            self._session = None


def _set_content_type(headers: Dict[str, str], value: str, replace: bool) -> None:
    """Give ``headers`` a Content-Type: ``value``, in place of one it has (whatever its case) if ``replace``."""
    given = [name for name in headers if name.lower() == "content-type"]
    if given and not replace:
        return
    for name in given:
        del headers[name]
    headers["Content-Type"] = value


def _as_httpx_gives_them(answer_headers: Mapping[str, str]) -> Dict[str, str]:
    """An answer's headers as ``dict.update(httpx_response.headers)`` leaves them (KServe fills
    ``response_headers`` so): names lower-cased, the values of a repeated header joined with ", "."""
    joined: Dict[str, str] = {}
    for name, value in answer_headers.items():
        key = name.lower()
        joined[key] = f"{joined[key]}, {value}" if key in joined else value
    return joined


def _error_text(body: bytes) -> str:
    """The message of an error answer: its JSON ``error``, else its text."""
    try:
        return str(orjson.loads(body).get("error") or body.decode(errors="replace"))
    except (orjson.JSONDecodeError, AttributeError):
        return body.decode(errors="replace")
