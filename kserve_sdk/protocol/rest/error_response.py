"""What the errors of the REST vocabularies beside v1 and v2 share (``TimeSeriesError``, ``OpenAIError``):
an exception a model raises to answer with an error document (an ``ErrorResponse``) or a message."""
from typing import Any


class ErrorResponseException(Exception):
    """An exception carrying its answer: an ``ErrorResponse`` (``response.error.message`` is its text) or a
    message."""

    def __init__(self, response: Any):
        super().__init__(response)
        self.response = response

    def __str__(self) -> str:
        error = getattr(self.response, "error", None)
        return error.message if error is not None else str(self.response)
