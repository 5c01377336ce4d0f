"""gRPC vocabulary: the Open Inference Protocol messages tritonclient ships, and conversions.

We never generate a second copy of the ``inference.*`` messages: protobuf's default pool refuses two
files defining the same symbols, so a second copy would make ``tritonclient.grpc`` unimportable beside
this package. ``grpc_predict_v2_pb2`` / ``grpc_predict_v2_pb2_grpc`` are KServe's import paths for them.
"""
