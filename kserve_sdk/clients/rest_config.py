"""KServe's ``RESTConfig``, and how its httpx-style settings become the aiohttp ones our REST client runs on.

A KServe program passes httpx's types (``httpx.Timeout``, ``httpx.BasicAuth``, an ``ssl.SSLContext`` or a CA
bundle path for ``verify``); they are read by what they hold, so httpx need not be installed to use ours.
"""
import base64
import os
import ssl
from typing import Any, Dict, Optional, Union

import aiohttp


class RESTConfig:
    """Settings of an :class:`~kserve_sdk.clients.rest.InferenceRESTClient` (KServe's names and defaults).

    Args:
        transport: KServe's httpx transport; ours has none to take (anything but None is refused).
        protocol: "v1" or "v2" (or a ``PredictorProtocol``): which routes the calls take.
        retries: extra attempts when the server cannot be reached.
        http2: accepted and ignored: the client speaks HTTP/1.1.
        timeout: seconds for one whole call; None for no limit; an ``httpx.Timeout`` (or httpx's
            ``(connect, read, write, pool)`` tuple) limits its phases instead (there is no write limit).
        cert: a client certificate: a file, ``(cert file, key file)`` or ``(cert file, key file, password)``.
        verify: True (the system's CAs), False (no verification), a CA bundle file or folder, or an
            ``ssl.SSLContext``.
        auth: ``(user, password)`` or an ``httpx.BasicAuth``.
        verbose: kept for KServe's programs.
    """

    def __init__(self, transport: Any = None, protocol: Any = "v1", retries: int = 3, http2: bool = False,
                 timeout: Any = 60, cert: Any = None, verify: Union[bool, str, ssl.SSLContext] = True,
                 auth: Any = None, verbose: bool = False):
        if transport is not None:
            raise TypeError("RESTConfig(transport=...) takes an httpx transport, which this client (built on "
                            "aiohttp) cannot use; leave it out")
        protocol = getattr(protocol, "value", protocol)
        self.transport = None
        self.protocol = protocol.lower() if isinstance(protocol, str) else protocol
        self.retries = retries
        self.http2 = http2
        self.timeout = timeout
        self.cert = cert
        self.verify = verify
        self.auth = auth
        self.verbose = verbose
        # a setting of the wrong kind is told now, not at the first call
        client_timeout(timeout)
        auth_headers(auth)


def client_timeout(timeout: Any) -> aiohttp.ClientTimeout:
    """aiohttp's timeout for KServe's ``timeout``: seconds for the whole call, None, an ``httpx.Timeout`` or
    httpx's ``(connect, read, write, pool)`` tuple."""
    if timeout is None:
        return aiohttp.ClientTimeout(total=None)
    if isinstance(timeout, (int, float)) and not isinstance(timeout, bool):
        return aiohttp.ClientTimeout(total=float(timeout))
    if isinstance(timeout, tuple) and len(timeout) == 4:
        connect, read, _write, pool = timeout
    elif all(hasattr(timeout, phase) for phase in ("connect", "read", "write", "pool")):
        connect, read, pool = timeout.connect, timeout.read, timeout.pool
    else:
        raise TypeError(f"timeout must be seconds, None, an httpx.Timeout or a (connect, read, write, pool) "
                        f"tuple, not {timeout!r}")
    # aiohttp's "connect" is the wait for a pooled connection plus making one: httpx's pool limit
    return aiohttp.ClientTimeout(total=None, connect=pool, sock_connect=connect, sock_read=read)


def ssl_setting(verify: Union[bool, str, ssl.SSLContext], cert: Any) -> Union[bool, ssl.SSLContext]:
    """aiohttp's ``ssl`` for KServe's ``verify`` and ``cert``."""
    if isinstance(verify, ssl.SSLContext):
        context: Optional[ssl.SSLContext] = verify
    elif isinstance(verify, (str, os.PathLike)):
        where = os.fspath(verify)
        context = ssl.create_default_context(capath=where) if os.path.isdir(where) else \
            ssl.create_default_context(cafile=where)
    elif verify is False and cert:
        context = ssl.create_default_context()
        context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    else:
        context = None
    if cert:
        context = context or ssl.create_default_context()
        if isinstance(cert, tuple):
            context.load_cert_chain(*cert)
        else:
            context.load_cert_chain(cert)
    if context is not None:
        return context
    return verify is not False


def auth_headers(auth: Any) -> Dict[str, str]:
    """The ``Authorization`` header every call sends for KServe's ``auth``: ``(user, password)`` (text or
    bytes, UTF-8 as httpx sends them) or an ``httpx.BasicAuth``."""
    if auth is None:
        return {}
    if isinstance(auth, tuple) and len(auth) == 2:
        user, password = (v if isinstance(v, bytes) else str(v).encode() for v in auth)
        return {"Authorization": "Basic " + base64.b64encode(user + b":" + password).decode("ascii")}
    if type(auth).__name__ == "BasicAuth" and hasattr(auth, "sync_auth_flow"):  # httpx.BasicAuth
        import httpx

        signed = next(auth.sync_auth_flow(httpx.Request("GET", "http://localhost/")))
        return {"Authorization": signed.headers["Authorization"]}
    raise TypeError(f"auth must be (user, password) or an httpx.BasicAuth, not {type(auth).__name__}")
