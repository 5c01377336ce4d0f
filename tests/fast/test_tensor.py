"""protocol/tensor.py, dtypes.py and binary.py: a tensor's three forms (JSON values, raw wire bytes, numpy)
converted into one another for every v2 datatype, and every way its content can disagree with its header."""
import numpy as np
import pytest

from kserve_sdk.errors import InferenceError, InvalidInput
from kserve_sdk.protocol.binary import deserialize_bytes_tensor, serialize_bytes_tensor
from kserve_sdk.protocol.dtypes import DATATYPES, datatype_of, element_size, np_dtype_of
from kserve_sdk.protocol.infer_type import InferInput, InferOutput
from kserve_sdk.protocol.tensor import MAX_DIMS, DataDoesNotFit, check_tensor_header, expected_nbytes, in_shared_memory

#: v2 datatype -> (little-endian numpy dtype on the wire, JSON values that fit it)
NUMERIC = {
    "BOOL": ("<?", [True, False, True, True]),
    "INT8": ("<i1", [-128, 0, 1, 127]),
    "INT16": ("<i2", [-32768, -1, 2, 32767]),
    "INT32": ("<i4", [-2 ** 31, 0, 7, 2 ** 31 - 1]),
    "INT64": ("<i8", [-2 ** 63, 0, 9, 2 ** 63 - 1]),
    "UINT8": ("<u1", [0, 1, 128, 255]),
    "UINT16": ("<u2", [0, 1, 40000, 65535]),
    "UINT32": ("<u4", [0, 1, 3_000_000_000, 2 ** 32 - 1]),
    "UINT64": ("<u8", [0, 1, 2 ** 63, 2 ** 64 - 1]),
    "FP16": ("<f2", [0.5, -1.0, 2.0, 65504.0]),
    "FP32": ("<f4", [0.25, -1.5, 3.0, 1e30]),
    "FP64": ("<f8", [0.1, -1e300, 3.0, 1e-300]),
}
#: datatype -> a JSON value out of its range, and the words numpy's error uses for it
OUT_OF_RANGE = {
    "INT8": (128, "out of bounds for int8"), "INT16": (-32769, "out of bounds for int16"),
    "INT32": (2 ** 31, "out of bounds for int32"), "INT64": (2 ** 63, "too large"),
    "UINT8": (-1, "out of bounds for uint8"), "UINT16": (65536, "out of bounds for uint16"),
    "UINT32": (-5, "out of bounds for uint32"), "UINT64": (2 ** 64, "too large"),
}


def wire(datatype):
    dtype, values = NUMERIC[datatype]
    return np.array(values, dtype=dtype)


@pytest.mark.parametrize("datatype", NUMERIC)
def test_json_values_read_as_numpy_of_the_datatype_and_shape(datatype):
    tensor = InferInput("x", [2, 2], datatype, NUMERIC[datatype][1])
    array = tensor.as_numpy()
    assert array.dtype == np_dtype_of(datatype) and array.shape == (2, 2)
    assert array.reshape(-1).tolist() == wire(datatype).tolist()


@pytest.mark.parametrize("datatype", NUMERIC)
def test_json_values_go_on_the_wire_as_little_endian_elements(datatype):
    tensor = InferInput("x", [4], datatype, NUMERIC[datatype][1])
    assert bytes(tensor.raw_bytes()) == wire(datatype).tobytes()


@pytest.mark.parametrize("datatype", NUMERIC)
def test_raw_bytes_read_as_a_numpy_view_and_as_json(datatype):
    raw = wire(datatype).tobytes()
    tensor = InferInput("x", [2, 2], datatype)
    tensor._raw_data = raw
    array = tensor.as_numpy()
    assert array.shape == (2, 2) and not array.flags.writeable  # a view on the request bytes
    assert tensor.data == wire(datatype).tolist()
    assert tensor.raw_bytes() is raw


@pytest.mark.parametrize("datatype", NUMERIC)
def test_numpy_content_is_sent_as_json_or_raw(datatype):
    array = wire(datatype).astype(np_dtype_of(datatype)).reshape(2, 2)
    as_json = InferOutput("y", [2, 2], datatype)
    as_json.set_data_from_numpy(array, binary_data=False)
    assert as_json.data == array.reshape(-1).tolist() and not as_json.binary_data
    as_raw = InferOutput("y", [2, 2], datatype)
    as_raw.set_data_from_numpy(array)
    assert as_raw.binary_data and as_raw.data is None  # a binary tensor has no JSON data
    assert bytes(as_raw.raw_bytes()) == wire(datatype).tobytes()


@pytest.mark.parametrize("datatype", NUMERIC)
def test_a_raw_content_of_the_wrong_size_names_both_sizes(datatype):
    tensor = InferInput("x", [3], datatype)
    tensor._raw_data = wire(datatype).tobytes()  # four elements for a shape of three
    size = element_size(datatype)
    with pytest.raises(InvalidInput, match=rf"input 'x': {4 * size} bytes of {datatype} data given but shape \[3\] "
                                           rf"needs {3 * size}"):
        tensor.as_numpy()


@pytest.mark.parametrize("datatype", NUMERIC)
def test_a_json_count_that_disagrees_with_the_shape_names_both(datatype):
    tensor = InferInput("x", [2, 3], datatype, NUMERIC[datatype][1])
    with pytest.raises(InvalidInput, match=r"input 'x': 4 values given but shape \[2, 3\] needs 6"):
        tensor.as_numpy()


@pytest.mark.parametrize("datatype", OUT_OF_RANGE)
def test_a_value_out_of_range_does_not_fit(datatype):
    value, words = OUT_OF_RANGE[datatype]
    tensor = InferInput("x", [2], datatype, [1, value])
    with pytest.raises(DataDoesNotFit, match=f"input 'x': data does not fit datatype {datatype}: .*{words}") as info:
        tensor.as_numpy()
    assert (info.value.name, info.value.datatype) == ("x", datatype)
    with pytest.raises(DataDoesNotFit):  # the short lists struct packs fall back to numpy, which refuses too
        InferInput("x", [2], datatype, [1, value]).raw_bytes()


@pytest.mark.parametrize("datatype,value", [("INT32", "abc"), ("FP32", "x"), ("INT64", None), ("FP64", {"a": 1})])
def test_a_value_of_the_wrong_kind_does_not_fit(datatype, value):
    with pytest.raises(DataDoesNotFit, match=f"data does not fit datatype {datatype}"):
        InferInput("x", [1], datatype, [value]).as_numpy()


def test_a_long_list_out_of_range_does_not_fit_either():
    with pytest.raises(DataDoesNotFit, match="out of bounds for uint8"):
        InferInput("x", [21], "UINT8", [1] * 20 + [-1]).raw_bytes()


def test_data_does_not_fit_as_the_models_error_is_a_500():
    error = DataDoesNotFit("out", "UINT8", "too big").as_model_error("m")
    assert isinstance(error, InferenceError) and error.http_status == 500
    assert str(error) == "model 'm' returned output 'out' whose data does not fit datatype UINT8: too big"
    assert DataDoesNotFit("out", "UINT8", "too big").http_status == 400


def test_bytes_from_json_text_to_the_wire_and_back():
    tensor = InferInput("s", [2], "BYTES", ["a", "é"])
    assert tensor.as_numpy().tolist() == ["a", "é"] and tensor.as_string() == ["a", "é"]
    raw = bytes(tensor.raw_bytes())
    assert raw == b"\x01\x00\x00\x00a\x02\x00\x00\x00\xc3\xa9"
    back = InferInput("s", [2], "BYTES")
    back._raw_data = raw
    assert back.as_numpy().tolist() == [b"a", "é".encode()] and back.data == ["a", "é"]


def test_nested_bytes_json_is_flattened_and_objects_refused():
    assert InferInput("s", [2, 1], "BYTES", [["a"], ["b"]]).as_numpy().tolist() == [["a"], ["b"]]
    with pytest.raises(DataDoesNotFit, match="a BYTES element is a JSON object, not text"):
        InferInput("s", [2], "BYTES", [{"a": 1}, "x"]).as_numpy()


def test_bytes_that_are_not_utf8_are_named_by_element():
    tensor = InferInput("s", [2], "BYTES")
    tensor._raw_data = serialize_bytes_tensor(np.array([b"ok", b"\xff"], dtype=object))
    with pytest.raises(InvalidInput, match="input 's': element 1 is not UTF-8 text"):
        tensor.as_string()
    with pytest.raises(InvalidInput, match="tensor 's' holds bytes that are not UTF-8 text; request it with binary"):
        _ = tensor.data


def test_as_string_refuses_a_numeric_tensor():
    with pytest.raises(InvalidInput, match="invalid datatype FP32 in the input"):
        InferInput("x", [1], "FP32", [1.0]).as_string()


@pytest.mark.parametrize("elements", [[], [b""], [b"a", b"bc", b"\x00\xff"], [b"x" * 1000]])
def test_bytes_elements_round_trip_through_length_prefixes(elements):
    array = np.empty(len(elements), dtype=object)
    array[:] = elements
    raw = serialize_bytes_tensor(array)
    assert len(raw) == sum(4 + len(e) for e in elements)
    assert deserialize_bytes_tensor(raw, len(elements)).tolist() == elements
    assert deserialize_bytes_tensor(memoryview(raw)).tolist() == elements


def test_serialize_writes_text_and_numbers_as_utf8():
    array = np.array(["é", 12, np.bytes_(b"b")], dtype=object)
    assert serialize_bytes_tensor(array) == b"\x02\x00\x00\x00\xc3\xa9\x02\x00\x00\x0012\x01\x00\x00\x00b"


@pytest.mark.parametrize("raw,count,message", [
    (b"\x01\x00", -1, "BYTES element at offset 0 has a truncated length prefix"),
    (b"\x01\x00\x00\x00a\x05\x00", -1, "BYTES element at offset 5 has a truncated length prefix"),
    (b"\x05\x00\x00\x00ab", -1, "BYTES element length 5 at offset 0 runs past the end of the data"),
    (b"\x01\x00\x00\x00a", 2, "1 BYTES elements given but the shape needs 2"),
])
def test_broken_bytes_content_is_the_clients_error(raw, count, message):
    with pytest.raises(InvalidInput, match=f"input 'b': {message}"):
        deserialize_bytes_tensor(raw, count, "b")


def test_a_raw_bytes_tensor_with_too_few_elements_names_the_count():
    tensor = InferInput("b", [3], "BYTES")
    tensor._raw_data = b"\x01\x00\x00\x00a"
    with pytest.raises(InvalidInput, match="input 'b': 1 BYTES elements given but the shape needs 3"):
        tensor.as_numpy()


def test_bf16_travels_raw_and_reads_as_uint16_bit_patterns():
    tensor = InferInput("h", [2], "BF16")
    tensor._raw_data = b"\x80\x3f\x00\x40"  # 1.0 and 2.0
    assert tensor.as_numpy().dtype == np.uint16 and tensor.data == [0x3F80, 0x4000]
    out = InferOutput("h", [2], "BF16")
    out.set_data_from_numpy(np.array([0x3F80, 0x4000], dtype=np.uint16))  # uint16 stands for BF16
    assert bytes(out.raw_bytes()) == b"\x80\x3f\x00\x40"
    assert expected_nbytes("BF16", [3]) == 6 and np_dtype_of("BF16") == np.uint16


def test_fp16_json_values_are_sent_as_half_floats():
    tensor = InferInput("h", [3], "FP16", [1.0, -2.5, 0.0])
    assert bytes(tensor.raw_bytes()) == np.array([1.0, -2.5, 0.0], dtype="<f2").tobytes()
    assert tensor.as_numpy().dtype == np.float16


def test_float64_data_of_an_fp32_tensor_is_sent_as_fp32():
    tensor = InferOutput("y", [2], "FP32", [0.0, 0.0])
    tensor._data, tensor._array = None, np.array([1.5, 2.5])  # a model's float64 array under an FP32 header
    assert bytes(tensor.raw_bytes()) == np.array([1.5, 2.5], dtype="<f4").tobytes()


def test_set_data_from_numpy_checks_the_datatype_and_the_shape():
    tensor = InferOutput("y", [2], "FP32")
    with pytest.raises(InferenceError, match="got unexpected datatype FP64 from numpy array, expected FP32"):
        tensor.set_data_from_numpy(np.zeros(2))
    # KServe's wording, a 1-d shape written as Python writes its tuple
    with pytest.raises(InferenceError, match=r"got unexpected numpy array shape \[3,\], expected \[2\]"):
        tensor.set_data_from_numpy(np.zeros(3, dtype=np.float32))
    with pytest.raises(InferenceError, match="input_tensor must be a numpy array"):
        tensor.set_data_from_numpy([1.0, 2.0])


def test_set_data_from_numpy_drops_a_stale_binary_size():
    tensor = InferOutput("y", [1], "INT32", parameters={"binary_data_size": 99, "keep": 1})
    tensor.set_data_from_numpy(np.array([3], dtype=np.int32))
    assert tensor.parameters == {"keep": 1}


def test_a_tensor_without_data_says_so():
    with pytest.raises(InvalidInput, match="'data' field is missing for tensor 'x'"):
        InferInput("x", [1], "FP32").as_numpy()


def test_an_unknown_datatype_is_refused_when_read():
    with pytest.raises(InvalidInput, match="input 'x': invalid datatype FP8"):
        InferInput("x", [1], "FP8", [1]).as_numpy()


def test_datatype_names_are_upper_cased_and_shape_is_a_list():
    tensor = InferInput("x", (2,), "fp32", [1, 2])
    assert tensor.datatype == "FP32" and tensor.shape == [2]
    tensor.shape = (1, 2)
    assert tensor.shape == [1, 2] and repr(tensor) == "InferInput(name='x', shape=[1, 2], datatype='FP32')"


def test_to_dict_has_parameters_only_when_set():
    assert InferInput("x", [1], "INT32", [5]).to_dict() == {"name": "x", "shape": [1], "datatype": "INT32",
                                                            "data": [5]}
    assert InferInput("x", [1], "INT32", [5], {"p": 1}).to_dict()["parameters"] == {"p": 1}


def test_tensors_of_equal_values_are_equal_whatever_their_form():
    from_json = InferInput("x", [2], "INT32", [1, 2])
    from_raw = InferInput("x", [2], "INT32")
    from_raw._raw_data = np.array([1, 2], dtype="<i4").tobytes()
    assert from_json == from_raw
    assert from_json != InferInput("x", [2], "INT32", [1, 3])
    assert from_json != InferInput("x", [2], "INT64", [1, 2])
    assert from_json != InferOutput("x", [2], "INT32", [1, 2])  # an input is not an output


def test_json_data_is_a_flat_array_or_list():
    tensor = InferOutput("y", [2, 2], "INT32", np.arange(4, dtype=np.int32).reshape(2, 2))
    assert isinstance(tensor.json_data(), np.ndarray) and tensor.json_data().tolist() == [0, 1, 2, 3]
    swapped = InferOutput("y", [2], "INT32", np.array([1, 2], dtype=">i4"))
    assert swapped.json_data() == [1, 2]  # orjson writes native arrays only
    assert InferOutput("y", [1], "INT32", [7]).json_data() == [7]


@pytest.mark.parametrize("tensor,problem", [
    (InferOutput("y", [2], "FP8", [1, 2]), "datatype 'FP8' is not a v2 datatype"),
    (InferOutput("y", [-1], "FP32", []), "shape [-1] is not a list of non-negative integers"),
    (InferOutput("y", [3], "FP32", np.zeros(2, dtype=np.float32)), "shape [3] needs 3 values but the data has 2"),
    (InferOutput("y", [3], "FP32", [1.0]), "shape [3] needs 3 values but the data has 1"),
    (InferOutput("y", [3, 1], "FP32", [[1.0], [2.0]]), "shape [3, 1] does not match the nesting of its data (2 rows)"),
    (InferOutput("y", [1], "FP32", "1.0"), "its data is a str, not a list or numpy array"),
    (InferOutput("y", [1], "FP32"), "it has no data"),
])
def test_content_problems_of_a_models_output_are_named(tensor, problem):
    assert tensor.content_problem() == problem


def test_content_problem_counts_raw_bytes_and_passes_good_tensors():
    raw = InferOutput("y", [2], "INT16")
    raw._raw_data = b"\x00" * 3
    assert raw.content_problem() == "shape [2] of INT16 needs 4 bytes but the data has 3"
    raw._raw_data = b"\x00" * 4
    assert raw.content_problem() is None
    assert InferOutput("y", [2, 1], "FP32", [[1.0], [2.0]]).content_problem() is None


@pytest.mark.parametrize("name,shape,datatype,message", [
    (1, [1], "FP32", "tensor name must be a string, got 1"),
    ("x", "1", "FP32", "input 'x': shape must be a list of integers, got '1'"),
    ("x", [1.0], "FP32", r"input 'x': shape must be a list of integers, got \[1.0\]"),
    ("x", [True], "FP32", r"input 'x': shape must be a list of integers, got \[True\]"),
    ("x", [2, -1], "FP32", r"input 'x': shape \[2, -1\] has a negative dimension"),
    ("x", [1] * (MAX_DIMS + 1), "FP32", f"input 'x': shape has {MAX_DIMS + 1} dimensions; at most 64"),
    ("x", [2 ** 32, 2 ** 32], "FP32", "has more elements than an int64 can count"),
    ("x", [1], "FLOAT", "input 'x': unsupported datatype 'FLOAT'"),
    ("x", [1], None, "input 'x': unsupported datatype None"),
])
def test_a_bad_tensor_header_is_named(name, shape, datatype, message):
    with pytest.raises(InvalidInput, match=message):
        check_tensor_header(name, shape, datatype)


def test_a_good_header_gives_its_shape_as_a_list():
    assert check_tensor_header("x", (2, 3), "fp32") == [2, 3]
    assert check_tensor_header("x", [], "BYTES") == []


@pytest.mark.parametrize("datatype", sorted(DATATYPES))
def test_expected_bytes_per_datatype(datatype):
    size = 0 if datatype == "BYTES" else np_dtype_of(datatype).itemsize
    assert element_size(datatype) == size
    assert expected_nbytes(datatype, [2, 3]) == (-1 if datatype == "BYTES" else 6 * size)
    assert expected_nbytes(datatype.lower(), [1]) == (-1 if datatype == "BYTES" else size)


@pytest.mark.parametrize("dtype,datatype", [
    (np.float32, "FP32"), (np.int8, "INT8"), (np.bool_, "BOOL"), (np.uint64, "UINT64"), (np.float16, "FP16"),
    ("<U3", "BYTES"), ("S2", "BYTES"), (object, "BYTES"), (">i4", "INT32"), (">f8", "FP64"),
    (np.complex64, None), ("datetime64[s]", None),
])
def test_numpy_dtypes_map_to_v2_datatypes(dtype, datatype):
    assert datatype_of(dtype) == datatype


def test_shared_memory_tensors_carry_no_data():
    assert in_shared_memory(InferInput("x", [1], "FP32", parameters={"shared_memory_region": "r"}))
    assert not in_shared_memory(InferInput("x", [1], "FP32", parameters={"other": 1}))
    assert not in_shared_memory(InferInput("x", [1], "FP32"))
