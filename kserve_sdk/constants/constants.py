"""Names and defaults shared across the server, under KServe's names."""
import os
from enum import Enum

KSERVE_LOGLEVEL = os.environ.get("KSERVE_LOGLEVEL", "INFO").upper()
KSERVE_MODEL_SERVER_NAME = "kserve"

DEFAULT_HTTP_PORT = 8080
DEFAULT_HTTPS_PORT = 8443
DEFAULT_GRPC_PORT = 8081
MAX_GRPC_MESSAGE_LENGTH = 8388608
DEFAULT_MAX_BODY_SIZE = 100 * 1024 * 1024

V1_ROUTE_PREFIX = "/v1"
V2_ROUTE_PREFIX = "/v2"
INFERENCE_CONTENT_LENGTH_HEADER = "inference-header-content-length"
KSERVE_TLS_CERT_FILE_ENV = "KSERVE_TLS_CERT_FILE"
KSERVE_TLS_KEY_FILE_ENV = "KSERVE_TLS_KEY_FILE"

MODEL_MOUNT_DIRS = "/mnt/models"
EXPLAINER_BASE_URL_FORMAT = "{0}://{1}"
PREDICTOR_URL_FORMAT = "{0}://{1}/v1/models/{2}:predict"
EXPLAINER_URL_FORMAT = "{0}://{1}/v1/models/{2}:explain"
PREDICTOR_V2_URL_FORMAT = "{0}://{1}/v2/models/{2}/infer"

GRPC_CONTENT_DATATYPE_MAPPINGS = {
    "BOOL": "bool_contents",
    "INT8": "int_contents",
    "INT16": "int_contents",
    "INT32": "int_contents",
    "INT64": "int64_contents",
    "UINT8": "uint_contents",
    "UINT16": "uint_contents",
    "UINT32": "uint_contents",
    "UINT64": "uint64_contents",
    "FP32": "fp32_contents",
    "FP64": "fp64_contents",
    "BYTES": "bytes_contents",
}


class PredictorProtocol(Enum):
    """The wire protocol a transformer uses to reach its predictor."""

    REST_V1 = "v1"
    REST_V2 = "v2"
    GRPC_V2 = "grpc-v2"


class ModelType(Enum):
    """Whether a model explains or predicts."""

    EXPLAINER = 1
    PREDICTOR = 2
