"""A job's completion callback: its status document POSTed as JSON to its ``callback_url`` when it ends.

Sent in the background (the runner never waits for it), tried again with growing pauses while the receiver
cannot be reached or answers 408, 429 or 5xx; redirects are not followed, so a callback reaches only a host
``--job_callback_hosts`` allows. A worker that stops gives deliveries still under way what is left of its
grace period (:func:`drain`).
"""
import asyncio
import json
from typing import Any, Dict, Optional, Set

from tornado.httpclient import AsyncHTTPClient, HTTPRequest

from ..logging import logger

TRIES = 5
FIRST_PAUSE_S = 0.5
TIMEOUT_S = 10.0
#: Answers worth asking again: the receiver was slow, busy or failing, not refusing this document.
RETRIED_STATUSES = frozenset((408, 429))

_deliveries: Set["asyncio.Task[bool]"] = set()


def send_status(url: str, document: Dict[str, Any]) -> None:
    """POST ``document`` (a job's status) to ``url`` in the background, with retries."""
    body = json.dumps(document).encode()
    task = asyncio.get_running_loop().create_task(deliver(url, body))
    _deliveries.add(task)
    task.add_done_callback(_deliveries.discard)


async def deliver(url: str, body: bytes, tries: int = TRIES, first_pause: float = FIRST_PAUSE_S,
                  timeout: float = TIMEOUT_S) -> bool:
    """POST ``body`` to ``url`` until it is taken (a 2xx answer) or ``tries`` are spent, pausing
    ``first_pause`` s after the first failure and twice as long after each next one; whether it was taken."""
    request = HTTPRequest(url, "POST", {"Content-Type": "application/json"}, body, connect_timeout=timeout,
                          request_timeout=timeout, follow_redirects=False)
    client = AsyncHTTPClient(force_instance=True)
    try:
        for attempt in range(tries):
            why = await _try_once(client, request)
            if why is None:
                return True
            if attempt + 1 == tries or why.startswith("answered 4"):
                logger.warning("job callback to %s not delivered after %d attempts: %s", url, attempt + 1, why)
                return False
            await asyncio.sleep(first_pause * 2 ** attempt)
    finally:
        client.close()
    return False


async def _try_once(client: AsyncHTTPClient, request: HTTPRequest) -> Optional[str]:
    """None when the receiver took the document, else why not ("answered 4xx" for a refusal not worth
    repeating)."""
    try:
        response = await client.fetch(request, raise_error=False)
    except Exception as e:  # noqa: BLE001 - unreachable, timed out, TLS: all worth another try
        return f"{type(e).__name__}: {e}"
    code = response.code
    if 200 <= code < 300:
        return None
    if code == 599:  # Tornado's code for no answer at all
        return f"no answer: {response.error}"
    if 400 <= code < 500 and code not in RETRIED_STATUSES:
        return f"answered {code} (not tried again)"
    return f"status {code}"


async def drain(timeout: float) -> None:
    """Wait up to ``timeout`` s for the deliveries under way, then give up on the rest."""
    pending = set(_deliveries)
    if not pending:
        return
    _, left = await asyncio.wait(pending, timeout=max(timeout, 0.0))
    for task in left:
        task.cancel()
    if left:
        logger.warning("%d job callbacks not delivered before the server stopped", len(left))
