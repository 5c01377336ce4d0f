"""Where a transformer's default ``predict`` forwards to, and how."""
from typing import Optional

from .constants.constants import PredictorProtocol


class PredictorConfig:
    """How to reach the predictor behind a transformer (KServe's ``PredictorConfig``).

    Args:
        predictor_host: host[:port] of the predictor; None means this model predicts itself.
        predictor_protocol: "v1", "v2" or "grpc-v2".
        predictor_use_ssl: use https / TLS to reach the predictor.
        predictor_request_timeout_seconds: timeout of one forwarded call.
        predictor_request_retries: extra attempts when the predictor cannot be reached.
        predictor_health_check: also require the predictor to be ready for this server to be ready.
    """

    def __init__(
        self,
        predictor_host: Optional[str],
        predictor_protocol: str = PredictorProtocol.REST_V1.value,
        predictor_use_ssl: bool = False,
        predictor_request_timeout_seconds: int = 600,
        predictor_request_retries: int = 0,
        predictor_health_check: bool = False,
    ):
        self._predictor_host = predictor_host
        self._predictor_protocol = (predictor_protocol or PredictorProtocol.REST_V1.value).lower()
        self._predictor_use_ssl = predictor_use_ssl
        self._predictor_request_timeout_seconds = predictor_request_timeout_seconds
        self._predictor_request_retries = predictor_request_retries
        self._predictor_health_check = predictor_health_check

    @property
    def predictor_host(self) -> Optional[str]:
        """host[:port] of the predictor, or None."""
        return self._predictor_host

    @property
    def predictor_protocol(self) -> str:
        """The protocol used to reach the predictor: "v1", "v2" or "grpc-v2"."""
        return self._predictor_protocol

    @property
    def predictor_use_ssl(self) -> bool:
        """Whether the predictor is reached over TLS."""
        return self._predictor_use_ssl

    @property
    def predictor_request_timeout_seconds(self) -> int:
        """Timeout of one forwarded call, in seconds."""
        return self._predictor_request_timeout_seconds

    @property
    def predictor_request_retries(self) -> int:
        """Extra attempts when the predictor cannot be reached."""
        return self._predictor_request_retries

    @property
    def predictor_health_check(self) -> bool:
        """Whether readiness also checks the predictor."""
        return self._predictor_health_check

    @property
    def predictor_base_url(self) -> str:
        """``http(s)://host[:port]`` of the predictor."""
        scheme = "https" if self._predictor_use_ssl else "http"
        return f"{scheme}://{self._predictor_host}"

    # KServe's short aliases.
    protocol = predictor_protocol
    timeout = predictor_request_timeout_seconds
    retries = predictor_request_retries
    use_ssl = predictor_use_ssl
