"""The request fields that completions and chat completions share: how to sample, stop and stream the
answer (OpenAI's, then vllm's own), and the request's id and priority."""
from typing import Dict, List, Optional, Union

from pydantic import Field

from .common import OpenAIBaseModel, StreamOptions, random_uuid
from .response_format import ResponseFormat


class SamplingRequest(OpenAIBaseModel):
    """The sampling fields of a completion or chat request, with vllm's defaults."""

    frequency_penalty: Optional[float] = 0.0
    logit_bias: Optional[Dict[str, float]] = None
    presence_penalty: Optional[float] = 0.0
    response_format: Optional[ResponseFormat] = None
    seed: Optional[int] = None
    stop: Optional[Union[str, List[str]]] = Field(default_factory=list)
    stream: Optional[bool] = False
    stream_options: Optional[StreamOptions] = None
    temperature: Optional[float] = None
    top_p: Optional[float] = None
    user: Optional[str] = None
    # beyond OpenAI's, as vllm names them
    best_of: Optional[int] = None
    top_k: Optional[int] = None
    min_p: Optional[float] = None
    repetition_penalty: Optional[float] = None
    stop_token_ids: Optional[List[int]] = Field(default_factory=list)
    include_stop_str_in_output: bool = False
    ignore_eos: bool = False
    min_tokens: int = 0
    skip_special_tokens: bool = True
    priority: int = 0
    request_id: str = Field(default_factory=random_uuid)
