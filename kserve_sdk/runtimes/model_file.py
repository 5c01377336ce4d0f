"""Find the one model file a runtime serves in its model directory, as KServe's model servers do.

A directory holding no file with the runtime's extensions, or several, is a setup mistake: the error
names the directory and what is there, so the pod's log says what to fix.
"""
import os
from typing import Sequence


class ModelFileError(Exception):
    """The model directory holds no model file, or more than one."""


def find_model_file(model_dir: str, extensions: Sequence[str], runtime: str) -> str:
    """The path of the only file in ``model_dir`` whose name ends with one of ``extensions``.

    ``model_dir`` may also be the model file itself. Raises ModelFileError when there is none or several.
    """
    wanted = tuple(extensions)
    if os.path.isfile(model_dir) and model_dir.endswith(wanted):
        return model_dir
    if not os.path.isdir(model_dir):
        raise ModelFileError(f"{runtime}: model directory {model_dir} does not exist")
    names = sorted(os.listdir(model_dir))
    found = [n for n in names if n.endswith(wanted) and os.path.isfile(os.path.join(model_dir, n))]
    if len(found) == 1:
        return os.path.join(model_dir, found[0])
    kinds = " / ".join(wanted)
    if not found:
        present = ", ".join(names[:20]) + (", ..." if len(names) > 20 else "") if names else "nothing"
        raise ModelFileError(f"{runtime}: no {kinds} model file in {model_dir} (it holds: {present})")
    raise ModelFileError(f"{runtime}: {len(found)} model files in {model_dir} ({', '.join(found)}); "
                         "only one is allowed: remove the others or point --model_dir at one of them")
