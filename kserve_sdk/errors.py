"""Typed errors. Each knows the HTTP status and gRPC status code it is answered with.

Handlers never decide statuses themselves: they call :func:`status_of` (HTTP) or read ``grpc_code``.
The class names and messages are KServe's, so user code that raises or catches them keeps working.
"""
from contextlib import contextmanager
from http import HTTPStatus
from typing import Dict, Iterator, Optional, Tuple


class ModelMissingError(Exception):
    """The model files expected at a path are not there."""

    http_status = HTTPStatus.NOT_FOUND
    grpc_code = "NOT_FOUND"

    def __init__(self, path: str):
        self.path = path

    def __str__(self) -> str:
        return self.path


class InferenceError(RuntimeError):
    """Inference failed in a way the client did not cause (HTTP 500, gRPC INTERNAL)."""

    http_status = HTTPStatus.INTERNAL_SERVER_ERROR
    grpc_code = "INTERNAL"

    def __init__(self, reason: str, status: Optional[str] = None, debug_details: Optional[str] = None):
        self.reason = reason
        self.status = status
        self.debug_details = debug_details

    def __str__(self) -> str:
        return f"[{self.status}] {self.reason}" if self.status else self.reason


class InvalidInput(ValueError):
    """The request is malformed or does not fit the model (HTTP 400, gRPC INVALID_ARGUMENT)."""

    http_status = HTTPStatus.BAD_REQUEST
    grpc_code = "INVALID_ARGUMENT"

    def __init__(self, reason: str):
        self.reason = reason

    def __str__(self) -> str:
        return self.reason


class PayloadTooLarge(InvalidInput):
    """The request or response is larger than the server accepts (HTTP 413, gRPC RESOURCE_EXHAUSTED)."""

    http_status = HTTPStatus.REQUEST_ENTITY_TOO_LARGE
    grpc_code = "RESOURCE_EXHAUSTED"


class HeadersTooLarge(InvalidInput):
    """The request's headers are larger than the server reads (HTTP 431; the connection then closes)."""

    http_status = HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE


class UnsupportedEncoding(InvalidInput):
    """The request body is in a ``Content-Encoding`` the server does not undo (HTTP 415)."""

    http_status = HTTPStatus.UNSUPPORTED_MEDIA_TYPE


class ServerBusy(RuntimeError):
    """This worker is already answering ``--max_concurrent_requests`` calls (HTTP 503 with ``Retry-After``,
    gRPC UNAVAILABLE): refused at once rather than queued."""

    http_status = HTTPStatus.SERVICE_UNAVAILABLE
    grpc_code = "UNAVAILABLE"
    retry_after = 1

    def __init__(self, limit: int):
        self.reason = (f"The server is busy: {limit} requests are in flight in this worker "
                       "(--max_concurrent_requests); retry later.")

    def __str__(self) -> str:
        return self.reason


class DeadlineExceeded(RuntimeError):
    """The model did not answer within the request's timeout (HTTP 504, gRPC DEADLINE_EXCEEDED)."""

    http_status = HTTPStatus.GATEWAY_TIMEOUT
    grpc_code = "DEADLINE_EXCEEDED"

    def __init__(self, model_name: str, seconds: float, source: str):
        self.reason = f"model '{model_name}' did not answer within {seconds:g} s ({source}); the call was cancelled"

    def __str__(self) -> str:
        return self.reason


class QueueFull(RuntimeError):
    """A model's queue holds ``max_queue_size`` waiting calls: one more is refused at once (HTTP 503 with
    ``Retry-After``, gRPC UNAVAILABLE)."""

    http_status = HTTPStatus.SERVICE_UNAVAILABLE
    grpc_code = "UNAVAILABLE"
    retry_after = 1

    def __init__(self, model_name: str, limit: int):
        self.reason = (f"model '{model_name}' is busy: {limit} calls are waiting in its queue, its max_queue_size; "
                       "retry later.")

    def __str__(self) -> str:
        return self.reason


class QueueTimeout(DeadlineExceeded):
    """A call's timeout passed while it waited in its model's queue; it never ran (504, DEADLINE_EXCEEDED)."""

    def __init__(self, model_name: str, seconds: float):
        self.reason = (f"waited {seconds * 1000:g} ms in model '{model_name}''s queue, the call's timeout; "
                       "it did not run")


class ModelError(InferenceError):
    """The model raised an exception of its own (not one of ours): HTTP 500 / gRPC INTERNAL, with KServe's
    ``"<Type> : <message>"`` followed by the model's name."""

    def __init__(self, model_name: str, exc: BaseException):
        super().__init__(f"{type(exc).__name__} : {exc} (model '{model_name}')")
        self.model_name = model_name

    def __str__(self) -> str:
        return self.reason


def is_untyped(exc: BaseException) -> bool:
    """Whether an exception is a model's own (a bug or library error) rather than one that carries a status."""
    return getattr(exc, "http_status", None) is None and not isinstance(exc, NotImplementedError)


def model_error(model_name: str, e: BaseException) -> Optional[ModelError]:
    """A ModelError naming the model for an exception of the model's own code; None for typed errors
    (InvalidInput, ...) and for cancellations, which pass as they are."""
    return ModelError(model_name, e) if isinstance(e, Exception) and is_untyped(e) else None


@contextmanager
def naming_the_model(model_name: str) -> Iterator[None]:
    """Turn an exception of the model's own code into a ModelError naming the model (typed errors pass)."""
    try:
        yield
    except Exception as e:
        error = model_error(model_name, e)
        if error is None:
            raise
        raise error from e


class ModelNotFound(Exception):
    """No model with this name is registered (HTTP 404, gRPC NOT_FOUND). The message carries Triton's sentence
    (which Triton's clients look for) and KServe's."""

    http_status = HTTPStatus.NOT_FOUND
    grpc_code = "NOT_FOUND"

    def __init__(self, model_name: Optional[str] = None):
        self.model_name = model_name
        self.reason = (f"Request for unknown model: '{model_name}' is not found. "
                       f"Model with name {model_name} does not exist.")

    def __str__(self) -> str:
        return self.reason


class ModelUnavailable(ModelNotFound):
    """The repository knows the model but serves no version of it: unloaded, loading, or its load failed
    (HTTP 404, gRPC NOT_FOUND, as Triton answers a model without an available version). ``detail`` completes
    the sentence "Model <name> ..."."""

    def __init__(self, model_name: str, detail: str):
        self.model_name = model_name
        self.reason = (f"Request for unknown model: '{model_name}' has no available versions. "
                       f"Model {model_name} {detail}")


class ModelVersionNotFound(ModelNotFound):
    """The model does not serve the version a request names (HTTP 404, gRPC NOT_FOUND); ``served`` lists
    the versions it does serve."""

    def __init__(self, model_name: str, version: str, served: str):
        self.model_name = model_name
        numbered = all(part.strip().isdigit() for part in served.split(","))  # else names ("v1", a repository's)
        triton = (f"Request for unknown model: '{model_name}' version {int(version)} is not found."
                  if version.isascii() and version.isdigit() else
                  f"failed to get model version from specified version string '{version}': it is not a number."
                  if numbered else f"Request for unknown model: '{model_name}' version '{version}' is not found.")
        self.reason = f"{triton} Model '{model_name}' has no version '{version}'; versions served: {served}."


class WorkersShouldBeLessThanMaxWorkersError(Exception):
    """KServe's error for more workers than allowed (``max_workers``), for code that raises or catches it; the
    server raises it nowhere (``--workers`` has no upper bound here)."""

    def __init__(self, max_workers: Optional[int] = None):
        self.reason = f"Workers cannot be greater than {max_workers}"

    def __str__(self) -> str:
        return self.reason


class ModelNotReady(RuntimeError):
    """The model is registered but cannot serve yet (HTTP 503, gRPC UNAVAILABLE)."""

    http_status = HTTPStatus.SERVICE_UNAVAILABLE
    grpc_code = "UNAVAILABLE"

    def __init__(self, model_name: str, detail: Optional[str] = None):
        self.model_name = model_name
        self.error_msg = f"Model with name {model_name} is not ready."
        if detail:
            self.error_msg += " " + detail

    def __str__(self) -> str:
        return self.error_msg


class UnsupportedProtocol(Exception):
    """The protocol asked for is not one the server speaks (HTTP 501, gRPC UNIMPLEMENTED)."""

    http_status = HTTPStatus.NOT_IMPLEMENTED
    grpc_code = "UNIMPLEMENTED"

    def __init__(self, protocol_version: Optional[str] = None):
        self.reason = f"Unsupported protocol {protocol_version}."

    def __str__(self) -> str:
        return self.reason


class ServerNotReady(RuntimeError):
    """Some registered model is not ready (HTTP 503, gRPC UNAVAILABLE)."""

    http_status = HTTPStatus.SERVICE_UNAVAILABLE
    grpc_code = "UNAVAILABLE"

    def __init__(self, detail: Optional[str] = None):
        self.error_msg = "Server is not ready." + (" " + detail if detail else "")

    def __str__(self) -> str:
        return self.error_msg


class ServerNotLive(RuntimeError):
    """The server cannot serve at all (HTTP 503, gRPC UNAVAILABLE)."""

    http_status = HTTPStatus.SERVICE_UNAVAILABLE
    grpc_code = "UNAVAILABLE"

    def __init__(self, detail: Optional[str] = None):
        self.error_msg = "Server is not live." + (" " + detail if detail else "")

    def __str__(self) -> str:
        return self.error_msg


class SharedMemoryForbidden(RuntimeError):
    """A client used system shared memory on a server started without ``--allow_client_shm`` (403 /
    PERMISSION_DENIED)."""

    http_status = HTTPStatus.FORBIDDEN
    grpc_code = "PERMISSION_DENIED"

    def __str__(self) -> str:
        return "system shared memory is off on this server; start it with --allow_client_shm true to use it"


class PermissionDenied(RuntimeError):
    """The request lacks the header that opens a restricted group of APIs (``--http_restricted_api``,
    ``--grpc_restricted_protocol``): HTTP 403, gRPC PERMISSION_DENIED."""

    http_status = HTTPStatus.FORBIDDEN
    grpc_code = "PERMISSION_DENIED"

    def __init__(self, reason: str):
        self.reason = reason

    def __str__(self) -> str:
        return self.reason


class NoModelReady(RuntimeError):
    """``ModelServer.start`` was given models and none of them is ready."""

    def __init__(self, models: list, detail: Optional[str] = None):
        self.models = models
        self.detail = detail

    def __str__(self) -> str:
        names = [m.name for m in self.models]
        if len(names) == 1:
            return f"Model with name {names[0]} is not ready."
        return f"Models with names {', '.join(names)} are not ready."


def status_of(exc: BaseException) -> Tuple[int, str]:
    """Return the HTTP status and the client-facing message for any exception.

    Our typed errors carry their own status; ``NotImplementedError`` is 501; anything else the model
    raised is a 500 whose message names the exception type, as KServe does.
    """
    status = getattr(exc, "http_status", None)
    if status is not None:
        return int(status), str(exc)
    if isinstance(exc, NotImplementedError):
        return int(HTTPStatus.NOT_IMPLEMENTED), str(exc) or "Not implemented"
    return int(HTTPStatus.INTERNAL_SERVER_ERROR), f"{type(exc).__name__} : {exc}"


def grpc_code_of(exc: BaseException) -> str:
    """Return the name of the gRPC status code an exception is answered with (``grpc.StatusCode[name]``)."""
    code = getattr(exc, "grpc_code", None)
    if code is not None:
        return code
    if isinstance(exc, NotImplementedError):
        return "UNIMPLEMENTED"
    return "INTERNAL"


#: HTTP status <-> gRPC status code name, one row each, as google.rpc.Code pairs them, plus 413 for a
#: message larger than the server takes (gRPC answers that RESOURCE_EXHAUSTED) and REST's own refusals of a
#: body's encoding (415) and of headers too large (431), the client's errors. Both directions below
#: take the first row that matches: RESOURCE_EXHAUSTED reads as 413, as the server answers it.
STATUS_TABLE: Tuple[Tuple[int, str], ...] = (
    (400, "INVALID_ARGUMENT"),
    (401, "UNAUTHENTICATED"),
    (403, "PERMISSION_DENIED"),
    (404, "NOT_FOUND"),
    (409, "ALREADY_EXISTS"),
    (413, "RESOURCE_EXHAUSTED"),
    (415, "INVALID_ARGUMENT"),
    (429, "RESOURCE_EXHAUSTED"),
    (431, "INVALID_ARGUMENT"),
    (499, "CANCELLED"),
    (500, "INTERNAL"),
    (501, "UNIMPLEMENTED"),
    (503, "UNAVAILABLE"),
    (504, "DEADLINE_EXCEEDED"),
)


def _first_of_each(pairs) -> Dict:
    """``{key: value}`` keeping the first value given for each key."""
    table: Dict = {}
    for key, value in pairs:
        table.setdefault(key, value)
    return table


_GRPC_FOR_HTTP: Dict[int, str] = _first_of_each(STATUS_TABLE)
_HTTP_FOR_GRPC: Dict[str, int] = _first_of_each((code, status) for status, code in STATUS_TABLE)


def grpc_code_for_http(status: int) -> str:
    """The gRPC status code name that answers HTTP ``status`` (INTERNAL for a status not in the table)."""
    return _GRPC_FOR_HTTP.get(int(status), "INTERNAL")


def http_status_for_grpc(code: str) -> int:
    """The HTTP status that answers gRPC code ``code`` (its name, e.g. ``"NOT_FOUND"``; 500 when not in
    the table)."""
    return _HTTP_FOR_GRPC.get(code, 500)


class UpstreamError(InferenceError):
    """The predictor or explainer a transformer called answered with an error; its status is passed on."""

    def __init__(self, status: int, reason: str):
        super().__init__(reason)
        self.http_status = status if 400 <= status < 600 else 502
        self.grpc_code = grpc_code_for_http(self.http_status)
