"""The ``response_format`` a client may ask for: text, any JSON object, or JSON of a schema."""
from typing import Any, Dict, Literal, Optional

from pydantic import Field

from .common import OpenAIBaseModel


class JsonSchemaResponseFormat(OpenAIBaseModel):
    """A JSON schema the answer should follow (sent as ``schema``, read as ``json_schema``)."""

    name: str
    description: Optional[str] = None
    json_schema: Optional[Dict[str, Any]] = Field(default=None, alias="schema")
    strict: Optional[bool] = None


class ResponseFormat(OpenAIBaseModel):
    """``{"type": "text" | "json_object" | "json_schema", "json_schema": {...}}``."""

    type: Literal["text", "json_object", "json_schema"]
    json_schema: Optional[JsonSchemaResponseFormat] = None
