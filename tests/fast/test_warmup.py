"""scheduling/warmup.py: Warmup specs checked when they are made, the requests they generate, what a model's
``warmup`` list may hold, and readiness gated by the warm-up in the repository and the data plane."""
import asyncio
import logging
import struct

import numpy as np
import pytest

from kserve_sdk import InferRequest, Model, Warmup, WarmupInput
from kserve_sdk.dataplane import DataPlane
from kserve_sdk.errors import InferenceError
from kserve_sdk.model_repository import WARMING_UP, ModelRepository
from kserve_sdk.scheduling.warmup import declared_warmups, warm_up


# --- Warmup specs -----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("fields, message", [
    ({"cnt": 2}, "Warmup 'w': unknown field(s) 'cnt'; known: name, inputs, batch_size, count"),
    ({"count": 0}, "Warmup 'w': count must be an integer of at least 1, got 0"),
    ({"count": 1.5}, "Warmup 'w': count must be an integer of at least 1, got 1.5"),
    ({"batch_size": 0}, "Warmup 'w': batch_size must be an integer of at least 1, got 0"),
    ({"batch_size": True}, "Warmup 'w': batch_size must be an integer of at least 1, got True"),
    ({"inputs": {}}, "Warmup 'w': inputs must map each input's name to its datatype and dims, got {}"),
    ({"inputs": [("FP32", [1])]}, "Warmup 'w': inputs must map each input's name to its datatype and dims"),
    ({"inputs": {"": ("FP32", [1])}}, "Warmup 'w': inputs: an input name must be a non-empty string, got ''"),
    ({"inputs": {"x": ("FP33", [1])}}, "Warmup 'w': input 'x': unknown datatype 'FP33'; one of BF16, BOOL, BYTES"),
    ({"inputs": {"x": ("FP32", [-1])}}, "Warmup 'w': input 'x': dims must be a list of non-negative integers"),
    ({"inputs": {"x": ("FP32", "4")}}, "Warmup 'w': input 'x': dims must be a list of non-negative integers"),
    ({"inputs": {"x": ("FP32", [1], "ones")}}, "Warmup 'w': input 'x': data must be one of zero, random, got 'ones'"),
    ({"inputs": {"x": ("FP32",)}}, "Warmup 'w': input 'x': expected a WarmupInput, a (datatype, dims[, data]) "
                                   "tuple or a dict of WarmupInput's fields, got tuple"),
    ({"inputs": {"x": {"datatype": "FP32", "dims": [1], "zero_data": True}}},
     "Warmup 'w': input 'x': unknown field(s) 'zero_data'; known: datatype, dims, data, input_data_file"),
    ({"inputs": {"x": {"datatype": "FP32"}}}, "Warmup 'w': input 'x': dims is missing"),
    ({"inputs": {"x": {"datatype": "FP32", "dims": [1], "input_data_file": "/no/such/file"}}},
     "Warmup 'w': input 'x': input_data_file '/no/such/file' is not a file"),
])
def test_a_wrong_warmup_field_is_a_value_error_naming_it(fields, message):
    with pytest.raises(ValueError) as info:
        Warmup(**{"name": "w", "inputs": {"x": ("FP32", [1])}, **fields})
    assert message in str(info.value)


def test_a_wrong_warmup_input_is_a_value_error_naming_it(tmp_path):
    with pytest.raises(ValueError, match=r"WarmupInput: unknown field\(s\) 'shape'"):
        WarmupInput("FP32", [1], shape=[2])
    with pytest.raises(ValueError, match="WarmupInput: give data or input_data_file, not both"):
        WarmupInput("FP32", [1], "random", input_data_file=str(tmp_path))
    short = tmp_path / "short.bin"
    short.write_bytes(b"\0" * 4)
    with pytest.raises(ValueError, match=r"holds 4 bytes; dims \[2\] of FP32 need 8"):
        WarmupInput("FP32", [2], input_data_file=str(short))
    with pytest.raises(ValueError, match="Warmup: name must be a string, got 3"):
        Warmup(name=3, inputs={"x": ("FP32", [1])})


def test_tritons_datatype_names_are_read_as_v2_ones():
    assert WarmupInput("TYPE_FP32", [1]).datatype == "FP32"
    assert WarmupInput("TYPE_STRING", [1]).datatype == "BYTES"
    assert WarmupInput("int64", [1]).datatype == "INT64"


def test_generated_inputs_have_the_batch_size_before_their_dims_and_their_datatype():
    spec = Warmup(name="w", batch_size=4, inputs={
        "zeros": ("FP32", [3]), "ints": ("INT64", [2, 2], "random"), "floats": WarmupInput("FP16", [5], "random"),
        "flags": ("BOOL", [2], "random"), "text": ("BYTES", [2], "random"), "half": ("BF16", [1], "random")})
    request = spec.request("m")
    assert isinstance(request, InferRequest) and request.model_name == "m" and request.id == "w"
    arrays = {t.name: (t.datatype, t.as_numpy()) for t in request.inputs}
    assert {name: (dt, a.shape, str(a.dtype)) for name, (dt, a) in arrays.items()} == {
        "zeros": ("FP32", (4, 3), "float32"), "ints": ("INT64", (4, 2, 2), "int64"),
        "floats": ("FP16", (4, 5), "float16"), "flags": ("BOOL", (4, 2), "bool"),
        "text": ("BYTES", (4, 2), "object"), "half": ("BF16", (4, 1), "uint16")}
    assert (arrays["zeros"][1] == 0).all()
    ints, floats = arrays["ints"][1], arrays["floats"][1]
    assert 0 <= ints.min() and ints.max() < 100 and 0 <= floats.min() and floats.max() < 1
    assert list(arrays["text"][1].flat) == [b""] * 8  # random BYTES are zeros (empty), as in Triton
    halves = (arrays["half"][1].astype(np.uint32) << 16).view(np.float32)  # BF16 bit patterns of [0, 1) values
    assert ((0 <= halves) & (halves < 1)).all()


def test_file_inputs_are_one_sample_repeated_for_the_batch(tmp_path):
    numbers, words = tmp_path / "numbers.bin", tmp_path / "words.bin"
    numbers.write_bytes(np.array([1.5, 2.5], dtype=np.float32).tobytes())
    words.write_bytes(b"".join(struct.pack("<I", len(w)) + w for w in (b"hi", b"there")))
    spec = Warmup(name="files", batch_size=3, inputs={
        "x": WarmupInput("FP32", [2], input_data_file=str(numbers)),
        "s": {"datatype": "BYTES", "dims": [2], "input_data_file": str(words)}})
    assert spec.inputs["x"].data == "file"
    x, s = (t.as_numpy() for t in spec.request("m").inputs)
    assert x.tolist() == [[1.5, 2.5]] * 3 and s.tolist() == [[b"hi", b"there"]] * 3


# --- a model's warmup list --------------------------------------------------------------------------------------
class Declares(Model):
    """A model whose warm-up list is given."""

    def __init__(self, name, warmup):
        super().__init__(name)
        self.warmup = warmup


class WithMethod(Model):
    def warmup(self):  # a model's own method of that name is no warm-up declaration
        return "mine"


class InClassBody(Model):
    warmup = [{"instances": [1]}]


def test_the_items_of_a_warmup_list_and_what_each_is_sent_as():
    v2 = {"id": "two", "inputs": [{"name": "x", "shape": [1], "datatype": "FP32", "data": [1.0]}]}
    items = declared_warmups(Declares("m", [{"instances": [[1]]}, v2, {"data": 1},
                                            Warmup(name="z", inputs={"x": ("FP32", [1])}, count=3),
                                            Warmup(inputs={"x": ("FP32", [1])})]), "m")
    assert [(item.label, item.runs) for item in items] == [
        ("warmup[0] (a v1 request)", 1), ("warmup[1] ('two')", 1), ("warmup[2] (a v1 request)", 1),
        ("warmup[3] ('z')", 3), ("warmup[4] (a Warmup)", 1)]
    first, again = items[1].build(), items[1].build()
    assert isinstance(first, InferRequest) and first is not again and first.inputs[0].as_numpy().tolist() == [1.0]
    assert items[0].build() == {"instances": [[1]]} and items[0].build() is not items[0].build()
    assert declared_warmups(Model("m"), "m") == [] and declared_warmups(WithMethod("m"), "m") == []
    assert [item.label for item in declared_warmups(InClassBody("m"), "m")] == ["warmup[0] (a v1 request)"]


@pytest.mark.parametrize("warmup, message", [
    ({"instances": [1]}, "model 'm': warmup must be a list of request bodies (dicts) and kserve_sdk.Warmup items, "
                         "got dict"),
    (["zeros"], "model 'm': warmup[0] is a str, not a request body (a dict) or a kserve_sdk.Warmup"),
    ([{"inputs": [{"name": "x", "shape": [2], "datatype": "FP32", "data": [1.0]}]}],
     "model 'm': warmup[0] is not a v2 request: "),
    ([{"inputs": [{"name": "x", "shape": [1], "datatype": "FP99", "data": [1.0]}]}],
     "model 'm': warmup[0] is not a v2 request: "),
])
def test_a_wrong_warmup_list_is_a_value_error_naming_the_entry(warmup, message):
    with pytest.raises(ValueError) as info:
        declared_warmups(Declares("m", warmup), "m")
    assert message in str(info.value)


# --- readiness in the repository --------------------------------------------------------------------------------
def ready(repository, name):
    return asyncio.run(repository.is_model_ready(name))


def test_a_model_declaring_warmups_is_not_ready_until_its_warmup_passes():
    repository = ModelRepository()
    model = Declares("m", [{"instances": [1]}])
    model.load()
    repository.update(model)
    assert not ready(repository, "m") and repository.warming_up("m")
    assert asyncio.run(repository.index()) == [{"name": "m", "state": "LOADING", "reason": WARMING_UP}]
    repository.end_warmup("m", model, None)
    assert ready(repository, "m") and asyncio.run(repository.index()) == [{"name": "m", "state": "READY"}]


def test_a_failed_warmup_is_the_models_reason_in_the_index_until_it_is_registered_again():
    repository = ModelRepository()
    model = Declares("m", [{"instances": [1]}])
    model.load()
    repository.update(model)
    repository.end_warmup("m", model, "warm-up warmup[0] (a v1 request) failed: ValueError: no")
    assert not ready(repository, "m") and not repository.warming_up("m")
    assert asyncio.run(repository.index()) == [
        {"name": "m", "state": "UNAVAILABLE", "reason": "warm-up warmup[0] (a v1 request) failed: ValueError: no"}]
    plain = Model("m")
    plain.load()
    repository.update(plain)  # replaced by a model without warm-ups: the old warm-up's end changes nothing
    repository.end_warmup("m", model, "late")
    assert ready(repository, "m")
    repository.update(model)
    repository.unload("m")
    assert repository.warmups == {}


def test_a_wrong_warmup_list_is_refused_at_registration():
    repository = ModelRepository()
    with pytest.raises(ValueError, match=r"model 'alias': warmup\[0\] is a int"):
        repository.update(Declares("m", [7]), name="alias")
    assert repository.get_models() == {}


# --- running them through the data plane ------------------------------------------------------------------------
class Counting(Model):
    """Counts its stage calls; predict fails on an input named "bad"; records what predict was given."""

    def __init__(self, name, warmup):
        super().__init__(name)
        self.warmup, self.calls, self.given = warmup, {"preprocess": 0, "predict": 0, "postprocess": 0}, []
        self.ready = True

    async def preprocess(self, payload, headers=None):
        self.calls["preprocess"] += 1
        return payload

    async def predict(self, payload, headers=None):
        self.calls["predict"] += 1
        self.given.append(payload)
        if isinstance(payload, InferRequest) and payload.inputs[0].name == "bad":
            raise ValueError("cannot take it")
        return {"predictions": [1]} if isinstance(payload, dict) else [np.zeros((1, 1), dtype=np.float32)]

    async def postprocess(self, result, headers=None):
        self.calls["postprocess"] += 1
        return result


def serving(model):
    repository = ModelRepository()
    repository.update(model)
    return DataPlane(repository, enable_latency_logging=False)


def test_warm_up_runs_every_request_through_the_pipeline_then_the_model_is_ready(caplog):
    model = Counting("m", [{"instances": [[1, 2]]}, Warmup(name="g", inputs={"x": ("INT32", [2])}, batch_size=3,
                                                             count=2)])
    dataplane = serving(model)
    assert not asyncio.run(dataplane.model_ready("m"))
    with caplog.at_level(logging.INFO, logger="kserve"):
        assert asyncio.run(warm_up(dataplane, "m", model)) is None
    assert model.calls == {"preprocess": 3, "predict": 3, "postprocess": 3}
    assert model.given[0] == {"instances": [[1, 2]]}
    assert [(t.shape, t.datatype, t.as_numpy().dtype) for g in model.given[1:] for t in g.inputs] == [
        ([3, 2], "INT32", np.int32)] * 2
    assert asyncio.run(dataplane.model_ready("m")) and asyncio.run(dataplane.ready())
    lines = [r.getMessage() for r in caplog.records if "warm" in r.getMessage()]
    assert len(lines) == 1 and lines[0].startswith("model 'm' warmed up: 3 warm-up requests in ")


def test_a_failing_warmup_is_logged_once_and_leaves_the_model_not_ready(caplog):
    model = Counting("m", [{"instances": [1]}, Warmup(name="broken", inputs={"bad": ("FP32", [1])}, count=2),
                           {"instances": [2]}])
    dataplane = serving(model)
    with caplog.at_level(logging.INFO, logger="kserve"):
        reason = asyncio.run(warm_up(dataplane, "m", model))
    assert reason == "warm-up warmup[1] ('broken'), run 1 of 2 failed: ValueError: cannot take it"
    assert model.calls["predict"] == 2  # the third entry never ran
    assert [r.getMessage() for r in caplog.records if "warm" in r.getMessage()] == [
        "model 'm' is not ready: " + reason]
    assert [r.levelname for r in caplog.records if "warm" in r.getMessage()] == ["ERROR"]
    assert not asyncio.run(dataplane.model_ready("m"))
    assert asyncio.run(dataplane.repository_index()) == [{"name": "m", "state": "UNAVAILABLE", "reason": reason}]


def test_a_stopping_server_ends_the_warmup_quietly(caplog):
    model = Counting("m", [{"instances": [1]}])
    dataplane = serving(model)
    dataplane.draining = True
    with caplog.at_level(logging.INFO, logger="kserve"):
        assert "the server is stopping" in asyncio.run(warm_up(dataplane, "m", model))
    assert model.calls["predict"] == 0 and not [r for r in caplog.records if "warm" in r.getMessage()]


class Loader(ModelRepository):
    def load(self, name):
        warmup = [Warmup(name="w", inputs={"bad" if name == "broken" else "x": ("FP32", [1])})]
        self.update(Counting(name, warmup))
        return True


def test_a_repository_load_warms_the_model_up_and_a_failing_warmup_fails_the_load():
    dataplane = DataPlane(Loader(), enable_latency_logging=False)
    asyncio.run(dataplane.load("fine"))
    assert dataplane.get_model_from_registry("fine").calls["postprocess"] == 1
    assert asyncio.run(dataplane.model_ready("fine"))
    with pytest.raises(InferenceError) as info:
        asyncio.run(dataplane.load("broken"))
    reason = "warm-up warmup[0] ('w') failed: ValueError: cannot take it"
    assert str(info.value) == f"failed to load model 'broken': {reason}"
    assert not asyncio.run(dataplane.model_ready("broken"))
    assert {"name": "broken", "state": "UNAVAILABLE", "reason": reason} in asyncio.run(dataplane.repository_index())
