"""``python -m kserve_sdk.runtimes --framework sklearn|xgboost|lightgbm|onnx --model_dir DIR --model_name NAME``:
serve a saved model of the framework named.

One command for every runtime, as KServe's predictiveserver is one image for sklearn, XGBoost and LightGBM.
``--framework`` (default ``sklearn``, as KServe's; any case) picks the runtime that serves the model file:
``kserve_sdk.runtimes.sklearn``, ``xgboost``, ``lightgbm`` or ``onnx``, with that runtime's file rules,
answers and errors. ``--nthread`` (default 1) goes to the XGBoost, LightGBM and ONNX runtimes. A framework
that is not one of these stops the command before anything loads, with argparse's usage line and exit
status 2. Only the chosen framework's library is imported.
"""
import argparse
from typing import Callable, Dict

import kserve_sdk as kserve
from kserve_sdk.logging import logger

from .lightgbm import LightGBMModel
from .onnx import ONNXModel
from .sklearn import SKLearnModel
from .xgboost import XGBoostModel

DEFAULT_FRAMEWORK = "sklearn"
#: What builds each framework's model from the parsed flags.
FRAMEWORKS: Dict[str, Callable[[argparse.Namespace], kserve.Model]] = {
    "sklearn": lambda args: SKLearnModel(args.model_name, args.model_dir),
    "xgboost": lambda args: XGBoostModel(args.model_name, args.model_dir, args.nthread),
    "lightgbm": lambda args: LightGBMModel(args.model_name, args.model_dir, args.nthread),
    "onnx": lambda args: ONNXModel(args.model_name, args.model_dir, args.nthread),
}
THREADED = {"xgboost", "lightgbm", "onnx"}


def framework_name(value: str) -> str:
    """A ``--framework`` value in lower case, or an argparse error listing the frameworks there are."""
    name = value.strip().lower()
    if name not in FRAMEWORKS:
        known = ", ".join(list(FRAMEWORKS)[:-1]) + " or " + list(FRAMEWORKS)[-1]
        raise argparse.ArgumentTypeError(f"unknown framework {value!r}; choose {known}")
    return name


def add_framework_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--framework", "-framework", default=DEFAULT_FRAMEWORK, type=framework_name,
                        metavar="{" + ",".join(FRAMEWORKS) + "}",
                        help=f"The library the model was saved with (default: {DEFAULT_FRAMEWORK}).")


def build(args: argparse.Namespace) -> kserve.Model:
    """The model of the runtime ``--framework`` names."""
    threads = f", nthread {args.nthread}" if args.framework in THREADED else ""
    logger.info("model %s: framework %s%s", args.model_name, args.framework, threads)
    return FRAMEWORKS[args.framework](args)


if __name__ == "__main__":
    from .cli import main

    main(build, __doc__, nthread=True, add_flags=add_framework_flag)
