"""``/v1/rerank``: documents ordered by their relevance to a query, with vllm's field names and defaults."""
from typing import List, Optional

from pydantic import BaseModel, Field

from .common import OpenAIBaseModel, random_id


class RerankRequest(OpenAIBaseModel):
    """Score each of ``documents`` against ``query``; ``top_n`` (0: all) says how many to return."""

    model: Optional[str] = None
    query: str
    documents: List[str]
    top_n: int = Field(default_factory=lambda: 0)
    truncate_prompt_tokens: Optional[int] = None
    priority: int = 0


class RerankDocument(BaseModel):
    """A ranked document's text."""

    text: Optional[str] = None


class RerankResult(BaseModel):
    """One document's place: its index in the request, the document and its relevance score."""

    index: int
    document: RerankDocument
    relevance_score: float


class RerankUsage(BaseModel):
    """How many tokens the query and the documents took."""

    total_tokens: int


class Rerank(OpenAIBaseModel):
    """The answer of ``/v1/rerank`` (vllm's ``RerankResponse``), results most relevant first."""

    id: str = Field(default_factory=lambda: random_id("rerank"))
    model: str
    usage: RerankUsage
    results: List[RerankResult]
