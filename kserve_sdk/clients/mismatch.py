"""A server that answers in another protocol than its client speaks: told plainly, with what came back.

The clients find it where it shows, and only on an error's path: a REST client whose infer route answers 404
while the other REST protocol's route of the same model answers; a REST client answered with HTTP/2 frames (a
gRPC port); a gRPC client answered in HTTP/1.x (a REST port).
"""
import re

from ..errors import UpstreamError

#: what a server may be found to speak -> how a transformer is told to reach it instead
SPOKEN = {
    "v1": ("KServe v1 REST", "set --predictor_protocol v1"),
    "v2": ("Open Inference Protocol v2 REST", "set --predictor_protocol v2"),
    "rest": ("REST over HTTP/1.1, not gRPC",
             "set --predictor_protocol v1 or v2, or point --predictor_host at the predictor's gRPC port"),
    "grpc": ("gRPC over HTTP/2, not REST",
             "set --predictor_protocol grpc-v2, or point --predictor_host at the predictor's HTTP port"),
}

#: aiohttp's complaint about a status line that starts with an HTTP/2 SETTINGS frame (what a gRPC port sends
#: first), as the frame's bytes are quoted in it
_HTTP2_SETTINGS = re.compile(r"b'\\x00\\x00.{1,4}\\x04")
#: grpc's words for an HTTP/1.x server at the other end
_HTTP1_SERVER = "Trying to connect an http1.x server"


class ProtocolMismatch(UpstreamError):
    """The server at ``address`` speaks ``spoken`` (a key of :data:`SPOKEN`) where the client asked in
    ``asked``; ``evidence`` is what came back. Answered 502: the call reached a server that could not take it."""

    def __init__(self, address: str, asked: str, spoken: str, evidence: str):
        super().__init__(502, f"{address} speaks {SPOKEN[spoken][0]}, not {asked}: {evidence}")
        self.address, self.asked, self.spoken, self.evidence = address, asked, spoken, evidence

    def for_transformer(self, predictor_protocol: str) -> UpstreamError:
        """The same, told to whoever runs a transformer: which flag disagrees with the predictor, and the fix."""
        what, fix = SPOKEN[self.spoken]
        return UpstreamError(502, f"the predictor at {self.address} speaks {what}, but --predictor_protocol is "
                                  f"{predictor_protocol}: {self.evidence}; {fix}")


def is_http2_answer(parser_message: str) -> bool:
    """Whether aiohttp's bad-status-line message quotes an HTTP/2 SETTINGS frame (a gRPC port's first bytes)."""
    return "Bad status line" in parser_message and _HTTP2_SETTINGS.search(parser_message) is not None


def is_http1_server(grpc_details: str) -> bool:
    """Whether a gRPC error's details say the server answered in HTTP/1.x (a REST port)."""
    return _HTTP1_SERVER in grpc_details
