"""Ready-made runtimes: serve a saved scikit-learn, XGBoost, LightGBM or ONNX model with no code.

``python -m kserve_sdk.runtimes.sklearn --model_dir DIR --model_name NAME`` (or ``xgboost``, ``lightgbm``,
``onnx``; or ``python -m kserve_sdk.runtimes --framework sklearn|xgboost|lightgbm|onnx``, as KServe's
predictiveserver) finds the one model file in ``DIR`` (or in what ``STORAGE_URI`` downloads) and serves it over v1
and v2 REST and gRPC with every ``ModelServer`` flag. Each runtime's library comes with its extra:
the ``sklearn`` extra (``xgboost``, ``lightgbm``, ``onnx``, or ``runtimes`` for all).
See docs/runtimes.md.
"""
