"""Triton's classification extension: a requested output with ``parameters.classification`` = N (tritonclient's
``InferRequestedOutput(name, class_count=N)``) is answered as the top N classes of each row instead of the
raw scores.

The classified output is a BYTES tensor of strings ``"<score>:<index>"``, or ``"<score>:<index>:<label>"`` when
the model names its classes, highest score first (equal scores: lower index first). Scores are written as
Triton writes them: integers as they are, floats with six decimals (``"0.750000:2:cat"``).

An output of two or more dimensions is read as one row per entry of its first dimension, the batch, and is
answered with shape ``[batch, N]``; a one-dimensional output is one row, answered with shape ``[N]``. N is
capped at the number of classes in a row.

Labels come from the model's ``labels`` attribute: a list of class names for every output, or a dict of
output name -> list of class names. A class past the end of its list has no label.
"""
from math import prod
from typing import Any, Iterable, List, Optional, Sequence

import numpy as np

from ..errors import InvalidInput
from .infer_tensors import InferOutput, RequestedOutput, param_value
from .tensor import SHM_REGION, Tensor

#: The requested output's parameter naming the number of classes.
CLASSIFICATION = "classification"


def class_count(wanted: RequestedOutput) -> Optional[int]:
    """The number of classes ``wanted`` asks for, or None when it asks for none. A count that is not an
    integer of at least 1, or one together with a shared-memory region, is refused (InvalidInput)."""
    params = wanted.parameters
    if not params or CLASSIFICATION not in params:
        return None
    count = param_value(params[CLASSIFICATION])
    if type(count) is not int or count < 1:  # type(): True is an int to isinstance
        raise InvalidInput(f"invalid value for 'classification' parameter of output '{wanted.name}': the class "
                           f"count (class_count) must be an integer of at least 1, got {count!r}")
    if SHM_REGION in params:
        raise InvalidInput(f"output '{wanted.name}': Output can't set both 'shared_memory_region' and "
                           "'classification'")
    return count


def check_class_counts(outputs: Iterable[RequestedOutput]) -> None:
    """Refuse a bad class count among the requested ``outputs`` before the model runs."""
    for wanted in outputs:
        class_count(wanted)


def classify_requested(response: Any, outputs: Sequence[RequestedOutput], labels: Any = None) -> None:
    """Replace each output of ``response`` (an InferResponse) that ``outputs`` asks classes of by its top
    classes; ``labels`` is the model's ``labels`` attribute, if any. An output that cannot be classified
    (BYTES, BOOL) is the client's error (InvalidInput)."""
    for wanted in outputs:
        count = class_count(wanted)
        if count is None:
            continue
        for index, tensor in enumerate(response.outputs):
            if tensor.name == wanted.name:
                response.outputs[index] = top_classes(tensor, count, labels_for(labels, wanted.name))
                break


def labels_for(labels: Any, output_name: str) -> Optional[Sequence[Any]]:
    """The class names of one output from a model's ``labels`` (a list, or a dict by output name)."""
    if isinstance(labels, dict):
        return labels.get(output_name)
    return labels


def top_classes(tensor: Tensor, count: int, labels: Optional[Sequence[Any]] = None) -> InferOutput:
    """The top ``count`` classes of each row of ``tensor`` as Triton's classification strings."""
    scores = tensor.as_numpy()
    if tensor.datatype in ("BYTES", "BOOL") or scores.dtype.kind not in "iuf":
        raise InvalidInput(f"output '{tensor.name}' cannot be classified (class_count {count}): class result not "
                           f"available for output due to unsupported type '{tensor.datatype}'")
    rows = scores.reshape(scores.shape[0], prod(scores.shape[1:])) if scores.ndim >= 2 else scores.reshape(1, -1)
    kept = min(count, rows.shape[1])
    strings = [_row_classes(row, kept, labels) for row in rows]
    shape = [rows.shape[0], kept] if scores.ndim >= 2 else [kept]
    return InferOutput(tensor.name, shape, "BYTES", data=np.array(strings, dtype=np.object_).reshape(shape))


def _row_classes(row: np.ndarray, kept: int, labels: Optional[Sequence[Any]]) -> List[bytes]:
    # a stable sort of the reversed row, read backwards: highest first, equal scores by lower index first
    last = len(row) - 1
    best = [last - i for i in np.argsort(row[::-1], kind="stable")[::-1][:kept]]
    written = []
    for index in best:
        text = f"{_score(row[index])}:{index}"
        if labels is not None and index < len(labels):
            text += f":{labels[index]}"
        written.append(text.encode("utf-8"))
    return written


def _score(value: Any) -> str:
    """A score as Triton's ``std::to_string`` writes it."""
    return f"{float(value):f}" if isinstance(value, np.floating) else str(int(value))
