"""``python -m kserve_sdk.runtimes.onnx --model_dir DIR --model_name NAME [--nthread N]``: serve an ONNX model
with onnxruntime (CPU).

The model is the one ``.onnx`` file in ``DIR``. Its graph decides everything: v2 requests give every graph
input by name (values of another numeric type are converted to the graph's when no precision class is
lost: integers to floats, FP64 to FP32), answers carry every output by name, or the ``outputs`` a request
asks for; the v2 metadata lists the graph's inputs and outputs. v1 ``instances`` are rows of the only
input, or objects ``{input name: value}`` for a model of several; v1 predictions are the only output's
rows, or one object per row by output name. ``--nthread`` (default 1) is onnxruntime's intra-op thread
count. Needs ``pip install 'kserve-sdk[onnx]'``.
"""
from typing import Any, Dict, List, Optional

import numpy as np

import kserve_sdk as kserve
from kserve_sdk.errors import InferenceError, InvalidInput
from kserve_sdk.utils.numpy_codec import from_np_dtype, to_np_dtype
from kserve_sdk.utils.utils import generate_uuid

from .cli import first_line
from .extras import import_extra
from .model_file import find_model_file

MODEL_EXTENSIONS = (".onnx",)
ONNX_TO_V2 = {
    "tensor(bool)": "BOOL", "tensor(int8)": "INT8", "tensor(int16)": "INT16", "tensor(int32)": "INT32",
    "tensor(int64)": "INT64", "tensor(uint8)": "UINT8", "tensor(uint16)": "UINT16", "tensor(uint32)": "UINT32",
    "tensor(uint64)": "UINT64", "tensor(float16)": "FP16", "tensor(float)": "FP32", "tensor(double)": "FP64",
    "tensor(string)": "BYTES",
}


def tensor_type(node: Any) -> Dict:
    """The v2 metadata of a graph input or output (``onnxruntime.NodeArg``); unknown dimensions are -1."""
    if node.type not in ONNX_TO_V2:
        raise ValueError(f"{node.name} is a {node.type}, and only tensors can be served "
                         "(a scikit-learn classifier converted by skl2onnx: pass options={'zipmap': False})")
    shape = [dim if isinstance(dim, int) else -1 for dim in (node.shape or [])]
    return {"name": node.name, "datatype": ONNX_TO_V2[node.type], "shape": shape}


class ONNXModel(kserve.Model):
    """An ONNX graph run by an onnxruntime session."""

    def __init__(self, name: str, model_dir: str, nthread: int = 1):
        super().__init__(name)
        self.model_dir = model_dir
        self.nthread = nthread
        self.model_file: Optional[str] = None
        self._inputs: List[Dict] = []
        self._outputs: List[Dict] = []

    def load(self) -> bool:
        """Find the ``.onnx`` file in ``model_dir`` (downloading a remote URI first) and open a session on it."""
        ort = import_extra("onnxruntime", "onnx")
        self.model_file = find_model_file(kserve.Storage.download(self.model_dir), MODEL_EXTENSIONS, "onnx")
        options = ort.SessionOptions()
        options.intra_op_num_threads = self.nthread
        options.inter_op_num_threads = 1
        self._session = ort.InferenceSession(self.model_file, options, providers=["CPUExecutionProvider"])
        self._invalid_argument = ort.capi.onnxruntime_pybind11_state.InvalidArgument
        self._inputs = [tensor_type(node) for node in self._session.get_inputs()]
        self._symbols = {node.name: node.shape or [] for node in self._session.get_inputs()}
        self._outputs = [tensor_type(node) for node in self._session.get_outputs()]
        self.ready = True
        return self.ready

    def get_input_types(self) -> List[Dict]:
        return self._inputs

    def get_output_types(self) -> List[Dict]:
        return self._outputs

    def predict(self, payload: Any, headers: Optional[Dict[str, str]] = None) -> Any:
        if isinstance(payload, dict):
            return {"predictions": self._v1_predictions(self._run(self._v1_feeds(payload)))}
        wanted = self._requested_outputs(payload)
        results = self._run(self._v2_feeds(payload), wanted)
        binary = payload.use_binary_outputs
        outputs = [self._output(name, array, binary) for name, array in zip(wanted, results, strict=True)]
        return kserve.InferResponse(response_id=payload.id or generate_uuid(), model_name=self.name,
                                    infer_outputs=outputs, use_binary_outputs=binary,
                                    requested_outputs=payload.request_outputs)

    def _run(self, feeds: Dict[str, np.ndarray], outputs: Optional[List[str]] = None) -> List[np.ndarray]:
        try:
            return self._session.run(outputs, feeds)
        except self._invalid_argument as e:  # values the graph refuses (the checks above let them through)
            raise InvalidInput(f"onnxruntime refused this input: {first_line(e)}") from e
        except Exception as e:
            raise InferenceError(f"onnxruntime failed: {first_line(e)}") from e

    def _v2_feeds(self, request: kserve.InferRequest) -> Dict[str, np.ndarray]:
        given = {tensor.name: tensor for tensor in request.inputs}
        self._check_names(given)
        return self._agreeing({spec["name"]: self._checked(spec, given[spec["name"]].as_numpy())
                               for spec in self._inputs})

    def _v1_feeds(self, payload: Dict) -> Dict[str, np.ndarray]:
        instances = payload["instances"] if "instances" in payload else payload.get("inputs")
        if not instances:
            raise InvalidInput('the request has no "instances"')
        if isinstance(instances[0], dict):
            self._check_names(instances[0])
            try:
                columns = {spec["name"]: [row[spec["name"]] for row in instances] for spec in self._inputs}
            except (KeyError, TypeError):
                raise InvalidInput(f"every instance must be an object of {self._input_names()}") from None
        elif len(self._inputs) == 1:
            columns = {self._inputs[0]["name"]: instances}
        else:
            raise InvalidInput(f"this model takes several inputs ({self._input_names()}): send each instance "
                               "as an object of them")
        return self._agreeing({spec["name"]: self._checked(spec, _array(columns[spec["name"]]))
                               for spec in self._inputs})

    def _v1_predictions(self, results: List[np.ndarray]) -> Any:
        if len(results) == 1:
            return results[0].tolist()
        names = [spec["name"] for spec in self._outputs]
        lists = [array.tolist() for array in results]
        if len({len(values) for values in lists}) != 1:  # outputs without a common batch dimension
            return dict(zip(names, lists, strict=True))
        return [dict(zip(names, row, strict=True)) for row in zip(*lists, strict=True)]

    def _requested_outputs(self, request: kserve.InferRequest) -> List[str]:
        names = [spec["name"] for spec in self._outputs]
        wanted = [output.name for output in request.request_outputs or []]
        unknown = [name for name in wanted if name not in names]
        if unknown:
            raise InvalidInput(f"unknown output {', '.join(unknown)}; the model's outputs are {', '.join(names)}")
        return wanted or names

    def _check_names(self, given: Dict) -> None:
        expected = [spec["name"] for spec in self._inputs]
        missing = [name for name in expected if name not in given]
        unknown = [name for name in given if name not in expected]
        if missing or unknown:
            problem = f"missing input {', '.join(missing)}" if missing else f"unknown input {', '.join(unknown)}"
            raise InvalidInput(f"{problem}; the model's inputs are {self._input_names()}")

    def _checked(self, spec: Dict, array: np.ndarray) -> np.ndarray:
        """``array`` as the graph's datatype, once its rank and fixed dimensions match the graph's."""
        name, shape, datatype = spec["name"], spec["shape"], spec["datatype"]
        if array.ndim != len(shape) or any(want not in (-1, got) for want, got in zip(shape, array.shape, strict=True)):
            raise InvalidInput(f"input {name}: expected shape {shape} (-1: any size), got {list(array.shape)}")
        if datatype == "BYTES":
            return _as_text(array)
        want = np.dtype(to_np_dtype(datatype))
        if array.dtype == want:
            return array
        if array.dtype.kind in "OSU" or not np.can_cast(array.dtype, want, "same_kind"):
            raise InvalidInput(f"input {name}: expected {datatype}, got {from_np_dtype(array.dtype) or array.dtype}")
        return array.astype(want)

    def _agreeing(self, feeds: Dict[str, np.ndarray]) -> Dict[str, np.ndarray]:
        """``feeds``, once the dimensions the graph names alike (``n`` of x and of w) have one size."""
        sizes: Dict[str, tuple] = {}
        for name, array in feeds.items():
            for symbol, size in zip(self._symbols[name], array.shape, strict=False):
                if isinstance(symbol, str):
                    first = sizes.setdefault(symbol, (name, size))
                    if first[1] != size:
                        raise InvalidInput(f"input {name}: dimension {symbol} is {size}, but {first[1]} in "
                                           f"input {first[0]}")
        return feeds

    def _input_names(self) -> str:
        return ", ".join(spec["name"] for spec in self._inputs)

    @staticmethod
    def _output(name: str, array: np.ndarray, binary: bool) -> kserve.InferOutput:
        tensor = kserve.InferOutput(name=name, shape=list(array.shape), datatype=from_np_dtype(array.dtype))
        tensor.set_data_from_numpy(array, binary_data=binary)
        return tensor


def _array(values: Any) -> np.ndarray:
    try:
        return np.asarray(values)
    except ValueError as e:  # ragged rows
        raise InvalidInput(f"the instances do not form one tensor: {e}") from None


def _as_text(array: np.ndarray) -> np.ndarray:
    """BYTES values as the str objects onnxruntime's string tensors take."""
    text = [v.decode() if isinstance(v, bytes) else str(v) for v in array.ravel()]
    return np.array(text, dtype=np.object_).reshape(array.shape)


if __name__ == "__main__":
    from .cli import main

    main(lambda args: ONNXModel(args.model_name, args.model_dir, args.nthread), __doc__, nthread=True)
