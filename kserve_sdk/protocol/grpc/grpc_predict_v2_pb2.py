"""KServe's import path for the v2 gRPC messages; they are tritonclient's (``grpc_service.proto``)."""
import typing as _typing  # under a private name: ``from grpc_predict_v2_pb2 import *`` takes messages only

from tritonclient.grpc.service_pb2 import *  # noqa: F401,F403
from tritonclient.grpc.service_pb2 import DESCRIPTOR  # noqa: F401

if _typing.TYPE_CHECKING:
    # protobuf builds the message classes when the module is imported, out of sight of a type checker,
    # and tritonclient ships no stubs: to it, every message name here is Any.
    def __getattr__(name: str) -> _typing.Any: ...
