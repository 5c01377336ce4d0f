"""kserve_sdk: serve a Python model over KServe v1 REST, Open Inference Protocol v2 REST and gRPC.

Drop-in for KServe's Python SDK: ``import kserve_sdk as kserve`` and the same custom model runs.
"""
from . import constants, errors, logging, model_server
from .batch import batch
from .clients.rest import InferenceRESTClient, RESTConfig
from .inference_client import InferenceGRPCClient
from .model import BaseKServeModel, InferenceModel, InferenceVerb, Model
from .model_repository import ModelRepository
from .model_server import ModelServer
from .predictor_config import PredictorConfig
from .protocol.infer_type import InferInput, InferOutput, InferRequest, InferResponse, RequestedOutput
from .scheduling import SchedulingPolicy, Warmup, WarmupInput
from .storage import Storage
from .timeseries.model import TimeSeriesModel
from .utils import utils

__all__ = [
    "BaseKServeModel", "InferenceModel", "InferenceVerb", "Model", "ModelServer", "ModelRepository",
    "PredictorConfig", "InferRequest", "InferResponse", "InferInput", "InferOutput", "RequestedOutput",
    "InferenceRESTClient", "InferenceGRPCClient", "RESTConfig", "Storage", "constants", "errors", "logging", "utils",
    "model_server", "TimeSeriesModel", "batch", "SchedulingPolicy", "Warmup", "WarmupInput",
]

