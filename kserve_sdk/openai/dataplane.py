"""The data plane of the OpenAI routes: which served models speak OpenAI, and one call of a model's OpenAI
method inside the common lifecycle (drain and overload accounting, Triton statistics, the latency line,
stream metrics) plus the LLM metrics: tokens from ``usage``, time to the first chunk, gaps between chunks.

Nothing here imports pydantic until an OpenAI call comes (``OpenAIAPI``): the requests arrive validated,
and answers are only looked at for ``usage``.
"""
from time import perf_counter
from typing import Any, Dict, List, Optional, Tuple
from weakref import WeakKeyDictionary

from .. import metrics
from ..dataplane import DataPlane
from ..errors import InvalidInput, ModelNotFound
from ..lifecycle import Call
from ..model_repository import ModelRepository
from .model import OpenAIEncoderModel, OpenAIGenerativeModel, OpenAIModel


class OpenAIAPI:
    """The OpenAI codec, errors, request and response types, imported by the first OpenAI call (they import
    pydantic, which a server of no OpenAI model never loads) and kept here: an import statement run on
    every request is not free (docs/performance.md)."""

    codec: Any = None
    errors: Any = None
    raw_request: Any = None
    types: Any = None

    @classmethod
    def load(cls) -> "type[OpenAIAPI]":
        """This class, its modules imported."""
        if cls.codec is None:
            from ..protocol.rest.openai import codec, errors, raw_request, types

            cls.errors, cls.raw_request, cls.types = errors, raw_request, types
            cls.codec = codec  # last: the others are set once this is
        return cls


#: endpoint -> (the model's method, the kind of model that has it, the API's name in errors)
ENDPOINTS = {
    "completions": ("create_completion", OpenAIGenerativeModel, "Completions API"),
    "chat_completions": ("create_chat_completion", OpenAIGenerativeModel, "Chat Completion API"),
    "embeddings": ("create_embedding", OpenAIEncoderModel, "Embeddings API"),
    "rerank": ("create_rerank", OpenAIEncoderModel, "Rerank API"),
}


def openai_models(repository: ModelRepository) -> Dict[str, OpenAIModel]:
    """The served models that speak OpenAI, by name; found again only when the repository has changed
    (its ``generation`` or its number of models), so a request without ``model`` does not look at every
    model of a large repository."""
    models = repository.get_models()
    key = (repository.generation, len(models))
    cached = _openai_models.get(repository)
    if cached is None or cached[0] != key:
        found = {name: model for name, model in models.items() if isinstance(model, OpenAIModel)}
        cached = _openai_models[repository] = (key, found)
    return cached[1]


#: repository -> ((generation, number of models) when looked at, the OpenAI models then)
_openai_models: "WeakKeyDictionary[ModelRepository, Tuple[Tuple[int, int], Dict[str, OpenAIModel]]]" = \
    WeakKeyDictionary()


#: repository -> the name of an OpenAI model it served when last asked (checked again each time)
_openai_seen: "WeakKeyDictionary[ModelRepository, str]" = WeakKeyDictionary()


def serves_openai(repository: ModelRepository) -> bool:
    """Whether any served model speaks OpenAI (the OpenAI routes answer only then). Every OpenAI request
    asks: the model found last time is looked at first, so that a server of thousands of models does
    not look at each of them every time."""
    models = repository.get_models()
    if isinstance(models.get(_openai_seen.get(repository, "")), OpenAIModel):
        return True
    for name, model in models.items():
        if isinstance(model, OpenAIModel):
            _openai_seen[repository] = name
            return True
    return False


def not_an_openai_model(name: str) -> ModelNotFound:
    """The 404 of a served model that does not speak OpenAI: on the OpenAI routes it is not there."""
    error = ModelNotFound(name)
    error.reason = f"Model with name {name} is not an OpenAI model."
    return error


def resolve_model_name(repository: ModelRepository, name: Optional[str]) -> str:
    """The model a request names; a request without ``model`` goes to the only OpenAI model, if there is one."""
    if name:
        return name
    served: List[str] = list(openai_models(repository))
    if len(served) == 1:
        return served[0]
    raise InvalidInput("the request must name its model (the `model` field): this server serves "
                       f"{len(served)} OpenAI models")


def _priority_of(request: Any) -> Optional[Dict[str, Any]]:
    """The request body's ``priority`` (vLLM's field of the OpenAI request) as the scheduler reads it; its
    default 0 leaves the ``x-kserve-priority`` header to decide."""
    priority = getattr(request, "priority", None)
    return {"priority": priority} if priority else None


async def openai_call(dataplane: DataPlane, endpoint: str, name: str, request: Any, raw_request: Any,
                      context: Dict[str, Any], call: Call) -> Any:
    """Run the model's method of ``endpoint`` as one model call: its answer, or a stream of its chunks (an
    async iterator, the same model call until it ends).

    ModelNotFound (404) and ModelNotReady (503) as for any call; a model of the other kind is InvalidInput.
    """
    method_name, kind, api = ENDPOINTS[endpoint]
    model = await dataplane.ready_model(name)
    if not isinstance(model, OpenAIModel):
        raise not_an_openai_model(name)
    if not isinstance(model, kind):
        raise InvalidInput(f"Model {name} does not support {api}")
    model_call = dataplane.model_call(name, call, model=model, parameters=_priority_of(request))
    answer = await model_call.run(getattr(model, method_name)(request, raw_request=raw_request, context=context),
                                  whole_is_one_execution=True, may_stream=True)
    if hasattr(answer, "__aiter__"):
        return dataplane.counted_stream(name, answer, call.headers, call.protocol, call.timings,
                                        watch=_ChunkMeter(name, call.started), deadline=model_call.deadline,
                                        begun=model_call)
    metrics.llm_tokens(name, OpenAIAPI.load().codec.usage_of(answer))
    return answer


#: A stream adds the short gaps it counted to the gap histogram every this many (and when it ends).
GAPS_PER_WRITE = 256


class _ChunkMeter:
    """An OpenAI stream's LLM metrics: time to the first chunk (from the request's arrival), the gaps
    between chunks, and the tokens of the ``usage`` its last chunks carry (read once, at the end: the
    usage chunk comes last, before a preformatted ``[DONE]`` if the model sends one). Gaps in the
    histogram's first bucket, most of them when the model yields without waiting, are counted here and
    added every :data:`GAPS_PER_WRITE`; a longer one is observed at once."""

    __slots__ = ("name", "last", "first_chunk", "gaps", "least", "short", "short_total", "previous", "final")

    def __init__(self, name: str, started: float):
        self.name, self.last = name, started
        self.first_chunk, self.gaps = metrics.llm_chunk_timers(name)
        self.least, self.short, self.short_total = self.gaps.least, 0, 0.0
        self.previous = self.final = None

    def seen(self, chunk: Any) -> None:
        """One chunk went out."""
        now = perf_counter()
        gap = now - self.last
        if self.final is None:
            self.first_chunk(gap)
        elif gap <= self.least:
            self.short += 1
            self.short_total += gap
            if self.short >= GAPS_PER_WRITE:
                self._add_short()
        else:
            self.gaps.observe(gap)
        self.last, self.previous, self.final = now, self.final, chunk

    def _add_short(self) -> None:
        self.gaps.add_least(self.short, self.short_total)
        self.short, self.short_total = 0, 0.0

    def ended(self) -> None:
        """The stream is over: count its tokens, and its short gaps not yet added."""
        if self.short:
            self._add_short()
        usage_of = OpenAIAPI.load().codec.usage_of
        usage = usage_of(self.final) if self.final is not None else None
        if usage is None and self.previous is not None:
            usage = usage_of(self.previous)
        metrics.llm_tokens(self.name, usage)
