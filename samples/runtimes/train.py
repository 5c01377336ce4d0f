"""Train a tiny iris model with one library and save it the way that library saves models:
``python train.py sklearn|xgboost|lightgbm|onnx [--out DIR]`` writes ``DIR/model.<ext>`` (default DIR:
``model-<library>``), the one file ``python -m kserve_sdk.runtimes.<library> --model_dir DIR`` serves.

The data is the iris set scikit-learn ships: 150 flowers, four measurements in centimetres (sepal length,
sepal width, petal length, petal width), three classes (0 setosa, 1 versicolor, 2 virginica).
"""
import argparse
import os

import numpy as np


def iris():
    """(features [150, 4] float64, labels [150] int64)."""
    from sklearn.datasets import load_iris

    return load_iris(return_X_y=True)


def save_sklearn(folder: str):
    """A LogisticRegression, saved with joblib as ``model.joblib``."""
    import joblib
    from sklearn.linear_model import LogisticRegression

    features, labels = iris()
    model = LogisticRegression(max_iter=1000).fit(features, labels)
    joblib.dump(model, os.path.join(folder, "model.joblib"))
    return model


def save_xgboost(folder: str):
    """Five boosting rounds of class probabilities, saved as ``model.json``."""
    import xgboost as xgb

    features, labels = iris()
    params = {"objective": "multi:softprob", "num_class": 3, "max_depth": 2, "nthread": 1}
    booster = xgb.train(params, xgb.DMatrix(features, label=labels), num_boost_round=5)
    booster.save_model(os.path.join(folder, "model.json"))
    return booster


def save_lightgbm(folder: str):
    """Five boosting rounds of class probabilities, saved as ``model.bst``."""
    import lightgbm as lgb

    features, labels = iris()
    params = {"objective": "multiclass", "num_class": 3, "num_leaves": 4, "verbose": -1, "num_threads": 1}
    booster = lgb.train(params, lgb.Dataset(features, labels), num_boost_round=5)
    booster.save_model(os.path.join(folder, "model.bst"))
    return booster


def save_onnx(folder: str, sklearn_model=None):
    """The scikit-learn model converted by skl2onnx (input ``X`` FP32 [N, 4]; outputs ``label`` and
    ``probabilities``: zipmap off, so both are tensors), saved as ``model.onnx``."""
    from skl2onnx import to_onnx

    if sklearn_model is None:
        from sklearn.linear_model import LogisticRegression

        sklearn_model = LogisticRegression(max_iter=1000).fit(*iris())
    graph = to_onnx(sklearn_model, iris()[0][:1].astype(np.float32), options={"zipmap": False})
    with open(os.path.join(folder, "model.onnx"), "wb") as f:
        f.write(graph.SerializeToString())


SAVERS = {"sklearn": save_sklearn, "xgboost": save_xgboost, "lightgbm": save_lightgbm, "onnx": save_onnx}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("library", choices=sorted(SAVERS))
    parser.add_argument("--out", help="the folder to save the model in (default: model-<library>)")
    args = parser.parse_args()
    folder = args.out or f"model-{args.library}"
    os.makedirs(folder, exist_ok=True)
    SAVERS[args.library](folder)
    print(f"saved {', '.join(os.listdir(folder))} in {folder}")


if __name__ == "__main__":
    main()
