"""POST JSON to an upstream HTTP API and read its answer whole or as Server-Sent Event lines.

What :class:`~kserve_sdk.protocol.rest.openai.OpenAIProxyModel` sends its requests through. Any status
the upstream answers comes back to the caller as is (a proxy passes a 4xx on with its body); only the
failures of the transport itself are raised, as :class:`~kserve_sdk.errors.UpstreamError`: 503 when
the upstream cannot be reached, 504 when it is too slow.

"Too slow" is ``read_timeout`` seconds without a byte from the upstream: for a stream that is the gap
between two chunks, not the stream's whole length, so a long generation never times out while it
keeps producing.
"""
import asyncio
from typing import AsyncIterator, Dict, Optional, Tuple

import aiohttp

from ..errors import UpstreamError
from .pool import keep


class UpstreamClient:
    """Pooled keep-alive connections to one upstream, made in the event loop that first uses them.

    Args:
        session: an ``aiohttp.ClientSession`` to send through instead of the client's own (it is then
            the caller's to close).
        connect_timeout: seconds to open a connection.
        read_timeout: seconds to wait for the upstream's next bytes.
    """

    def __init__(self, session: Optional[aiohttp.ClientSession] = None, connect_timeout: float = 5.0,
                 read_timeout: float = 30.0):
        if session is not None and not isinstance(session, aiohttp.ClientSession):
            # KServe's proxy takes an httpx.AsyncClient: say so at start, not at the first request
            raise TypeError(f"the HTTP client must be an aiohttp.ClientSession, not {type(session).__name__}")
        self._given = session
        self._own: Optional[aiohttp.ClientSession] = None
        self._timeout = aiohttp.ClientTimeout(total=None, sock_connect=connect_timeout, sock_read=read_timeout)
        self.read_timeout = read_timeout

    def _session(self) -> aiohttp.ClientSession:
        if self._given is not None:
            return self._given
        if self._own is None or self._own.closed:
            # a forked worker makes its own: a session belongs to the loop it was made in
            self._own = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0), timeout=self._timeout)
            keep(self)  # closed with the server's other clients when it stops
        return self._own

    async def post(self, url: str, body: bytes, headers: Dict[str, str]) -> Tuple[int, bytes]:
        """POST ``body``; the upstream's (status, body)."""
        try:
            async with self._session().post(url, data=body, headers=headers, timeout=self._timeout) as resp:
                return resp.status, await resp.read()
        except (TimeoutError, aiohttp.ClientConnectionError) as e:
            raise self._failure(url, e) from None

    async def get_status(self, url: str) -> int:
        """GET ``url``; the upstream's status (its health endpoint's answer)."""
        try:
            async with self._session().get(url, timeout=self._timeout) as resp:
                await resp.read()
                return resp.status
        except (TimeoutError, aiohttp.ClientConnectionError) as e:
            raise self._failure(url, e) from None

    async def post_stream(self, url: str, body: bytes,
                          headers: Dict[str, str]) -> Tuple[int, bytes, Optional[AsyncIterator[bytes]]]:
        """POST ``body`` asking for a stream. A 200 gives (200, b"", the body's lines as they arrive, each
        without its line end); another status gives (status, its whole body, None)."""
        try:
            resp = await self._session().post(url, data=body, headers=headers, timeout=self._timeout)
        except (TimeoutError, aiohttp.ClientConnectionError) as e:
            raise self._failure(url, e) from None
        if resp.status != 200:
            try:
                return resp.status, await resp.read(), None
            except (TimeoutError, aiohttp.ClientConnectionError) as e:
                raise self._failure(url, e) from None
            finally:
                resp.release()
        return 200, b"", self._lines(url, resp)

    async def _lines(self, url: str, resp: aiohttp.ClientResponse) -> AsyncIterator[bytes]:
        # closed on every way out: the end, a failure, or the consumer stopping (the client left), which
        # drops the connection and so tells the upstream to stop generating too
        try:
            while True:
                try:
                    line = await resp.content.readline()
                except (TimeoutError, aiohttp.ClientConnectionError, aiohttp.ClientPayloadError) as e:
                    raise self._failure(url, e) from None
                if not line:
                    return
                yield line.rstrip(b"\r\n")
        finally:
            resp.close()

    def _failure(self, url: str, exc: BaseException) -> UpstreamError:
        if isinstance(exc, asyncio.TimeoutError):
            return UpstreamError(504, f"the upstream {url} sent nothing for {self.read_timeout:g}s")
        return UpstreamError(503, f"cannot reach the upstream {url}: {exc or type(exc).__name__}")

    async def close(self) -> None:
        """Close the client's own connections (not a session it was given)."""
        if self._own is not None:
            await self._own.close()
            self._own = None
