"""What the scikit-learn, XGBoost and LightGBM runtimes share: one model file, rows of features in, one
tensor out.

A request's rows come from v1 ``instances`` or the first v2 input (``get_predict_input``). What a library
would answer with a traceback (a row of the wrong width, one flat row, text where numbers go) is answered
400 with what the model expects. The v2 metadata describes the model's real input width and, from one
prediction made at load time, its output's datatype and shape.
"""
import os
from typing import Any, Dict, List, Optional, Sequence

import numpy as np

import kserve_sdk as kserve
from kserve_sdk.errors import InvalidInput
from kserve_sdk.utils.numpy_codec import from_np_dtype
from kserve_sdk.utils.utils import get_predict_input, predict_response

from .model_file import find_model_file


class TabularModel(kserve.Model):
    """A model file of one library that predicts one array from rows of features.

    A subclass names its ``runtime``, ``extensions`` and ``input_datatype`` and implements
    ``load_file`` (returns the width of a row, or None when the model does not say) and ``predict_rows``.
    """

    runtime = ""
    extensions: Sequence[str] = ()
    input_datatype = "FP64"
    #: The v2 output's name, and whether a prediction of one value per row is answered as a column [N, 1]
    #: (MLServer's runtimes answer ``predict`` that way; a repository naming their classes gets it).
    output_name = "output-0"
    output_as_column = False

    def __init__(self, name: str, model_dir: str):
        super().__init__(name)
        self.model_dir = model_dir
        self.model_file: Optional[str] = None
        self.n_features: Optional[int] = None
        self._outputs: List[Dict] = []

    def load(self) -> bool:
        """Find the model file in ``model_dir`` (downloading a remote URI first) and load it."""
        model_dir = kserve.Storage.download(self.model_dir)
        self.model_file = find_model_file(model_dir, self.extensions, self.runtime)
        self.n_features = self.load_file(self.model_file)
        self._outputs = self._describe_output()
        self.ready = True
        return self.ready

    def load_file(self, path: str) -> Optional[int]:
        raise NotImplementedError

    def predict_rows(self, rows: Any) -> Any:
        raise NotImplementedError

    def columns(self) -> Optional[List[str]]:
        """Feature names v1 rows given as dicts are put in order by (None: as they come)."""
        return None

    def get_input_types(self) -> List[Dict]:
        width = self.n_features if self.n_features else -1
        return [{"name": "input-0", "datatype": self.input_datatype, "shape": [-1, width]}]

    def get_output_types(self) -> List[Dict]:
        return self._outputs

    def predict(self, payload: Any, headers: Optional[Dict[str, str]] = None) -> Any:
        rows = self._rows(payload)
        try:
            result = self.predict_rows(rows)
        except (ValueError, TypeError) as e:
            raise InvalidInput(f"{self.runtime} could not predict these rows: {e}") from e
        if self.output_as_column and isinstance(result, np.ndarray) and result.ndim == 1:
            result = result.reshape(-1, 1)
        return predict_response(payload, result, self.name, self.output_name)

    def _rows(self, payload: Any) -> Any:
        rows = get_predict_input(payload, columns=self.columns())
        if self.n_features is None or hasattr(rows, "columns"):
            return rows  # the model or a DataFrame's column names decide
        rows = np.asarray(rows)
        if rows.ndim != 2:
            raise InvalidInput(f"expected a 2-D input of rows [N, {self.n_features}] features, "
                               f"got shape {list(rows.shape)}")
        if rows.shape[1] != self.n_features:
            raise InvalidInput(f"expected rows of {self.n_features} features, got {rows.shape[1]} "
                               f"(input shape {list(rows.shape)})")
        return rows

    def _describe_output(self) -> List[Dict]:
        """The output's datatype and shape, read off a prediction for one row of zeros."""
        if not self.n_features:
            return []
        try:
            sample = np.asarray(self.predict_rows(np.zeros((1, self.n_features))))
        except Exception:  # a model that rejects zeros still serves; its metadata just stays unknown
            return []
        datatype = from_np_dtype(sample.dtype) or "BYTES"
        shape = [-1, 1] if self.output_as_column and sample.ndim == 1 else [-1, *sample.shape[1:]]
        return [{"name": self.output_name, "datatype": datatype, "shape": shape}]


def env_flag(name: str) -> bool:
    """Whether environment variable ``name`` is "true" (any case), as KServe's model servers read it."""
    return os.environ.get(name, "false").lower() == "true"
