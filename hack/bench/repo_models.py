"""The model repositories repo_bench.py serves: many tiny generated scikit-learn models, and MLServer's docs' three.

Generated repository (MLServer's layout, one folder per model, no versions):

    m00000/model-settings.json   {"name": "m00000", "implementation": "mlserver_sklearn.SKLearnModel",
                                  "parameters": {"uri": "./model.joblib"}}
    m00000/model.joblib          a LogisticRegression on 4 features, weights of its own
    ...

Model i answers class 2*i or 2*i + 1 (its ``classes_``), so an answer tells which model gave it: a client checks
``answer // 2 == i``. The repositories are written once into a cache folder (REPO_BENCH_CACHE, default
/tmp/repo-bench-cache), keyed by scikit-learn's version and this generator's; smaller ones are hard links to the
first models of the largest, so a rerun finds them at once.

Docs repository: three models whose ``model-settings.json`` files are written as MLServer's docs write them for its
scikit-learn runtime (the sklearn example, the multi-model serving example, the custom environment example).
"""

import json
import os
import shutil
import tempfile

import numpy as np

GENERATOR = 1                    # bump when what a generated model is changes
FEATURES = 4
SETTINGS = "model-settings.json"
IMPLEMENTATION = "mlserver_sklearn.SKLearnModel"
ROW = [0.5, -1.0, 2.0, 0.25]     # the row every bench request sends


def cache_root():
    return os.environ.get("REPO_BENCH_CACHE") or os.path.join(tempfile.gettempdir(), "repo-bench-cache")


def model_name(index):
    return f"m{index:05d}"


def model_of(answer):
    """The index of the model that answered ``answer`` (its predicted class)."""
    return int(answer) // 2


# --------------------------------------------------------------------------- generated models

def template():
    """A fitted binary LogisticRegression on FEATURES features: every generated model is it with other weights."""
    from sklearn.linear_model import LogisticRegression

    rng = np.random.default_rng(0)
    x = rng.normal(size=(64, FEATURES))
    return LogisticRegression().fit(x, (x[:, 0] > 0).astype(int))


def tiny_model(base, index, seed):
    """Model ``index``: base's fitted state with weights drawn for it and classes [2i, 2i + 1]."""
    import copy

    rng = np.random.default_rng([seed, index])
    model = copy.copy(base)
    model.coef_ = rng.normal(size=(1, FEATURES))
    model.intercept_ = rng.normal(size=1)
    model.classes_ = np.array([2 * index, 2 * index + 1])
    return model


def write_model(folder, name, model, settings):
    import joblib

    os.makedirs(folder, exist_ok=True)
    joblib.dump(model, os.path.join(folder, "model.joblib"))
    with open(os.path.join(folder, SETTINGS), "w") as f:
        json.dump(settings, f, indent=2)


def generated_settings(name):
    return {"name": name, "implementation": IMPLEMENTATION, "parameters": {"uri": "./model.joblib"}}


def generated(count, seed=1, progress=print):
    """The folder of a repository of ``count`` generated models (written on first use, cached after)."""
    import sklearn

    root = os.path.join(cache_root(), f"gen{GENERATOR}-sklearn{sklearn.__version__}-seed{seed}")
    folder = os.path.join(root, f"models-{count}")
    done = folder + ".complete"
    if os.path.exists(done):
        return folder
    largest = _largest(root, count)
    tmp = folder + ".partial"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    base = None if largest else template()
    for i in range(count):
        name = model_name(i)
        if largest:
            _link_model(os.path.join(largest, name), os.path.join(tmp, name))
        else:
            write_model(os.path.join(tmp, name), name, tiny_model(base, i, seed), generated_settings(name))
        if progress and (i + 1) % 2000 == 0:
            progress(f"  .. repo: {i + 1}/{count} models written to {folder}")
    shutil.rmtree(folder, ignore_errors=True)
    os.rename(tmp, folder)
    open(done, "w").close()
    return folder


def _largest(root, count):
    """A cached repository of at least ``count`` models, or None."""
    if not os.path.isdir(root):
        return None
    sizes = sorted(int(d[len("models-"):-len(".complete")]) for d in os.listdir(root)
                   if d.startswith("models-") and d.endswith(".complete"))
    bigger = [n for n in sizes if n >= count]
    return os.path.join(root, f"models-{bigger[0]}") if bigger else None


def _link_model(src, dst):
    os.makedirs(dst)
    for name in os.listdir(src):
        try:
            os.link(os.path.join(src, name), os.path.join(dst, name))
        except OSError:
            shutil.copy2(os.path.join(src, name), os.path.join(dst, name))


# --------------------------------------------------------------------------- MLServer's docs' repository

#: name -> (folder, its model-settings.json as MLServer's docs write it, model file, dataset, estimator)
DOCS_MODELS = {
    # docs/examples/sklearn: the file named by uri, beside the settings, and a version
    "mnist-svm": ("mnist-svm", {"name": "mnist-svm", "implementation": IMPLEMENTATION,
                                "parameters": {"uri": "./mnist-svm.joblib", "version": "v0.1.0"}},
                  "mnist-svm.joblib", "digits", "svc"),
    # docs/examples/mms: a version and no uri: MLServer's well-known file name, model.joblib
    "iris-logreg": ("iris-logreg", {"name": "iris-logreg", "implementation": IMPLEMENTATION,
                                    "parameters": {"version": "v0.1.0"}},
                    "model.joblib", "iris", "logreg"),
    # docs/examples/conda: a name and the implementation, nothing else
    "diabetes-tree": ("diabetes-tree", {"name": "diabetes-tree", "implementation": IMPLEMENTATION},
                      "model.joblib", "diabetes", "tree"),
}


def dataset(name):
    """(features, targets) of a dataset scikit-learn ships (no download)."""
    from sklearn import datasets

    if name == "digits":
        digits = datasets.load_digits()
        return digits.images.reshape((len(digits.images), -1)), digits.target
    return getattr(datasets, f"load_{name}")(return_X_y=True)


def docs_estimator(kind, x, y):
    """Trained as the docs train theirs: the first half of the rows (the docs' train_test_split, no shuffle)."""
    from sklearn import linear_model, svm, tree

    half = len(x) // 2
    if kind == "svc":
        est = svm.SVC(gamma=0.001)
    elif kind == "logreg":
        est = linear_model.LogisticRegression(max_iter=1000)
    else:
        est = tree.DecisionTreeRegressor(max_depth=4, random_state=0)
    return est.fit(x[:half], y[:half])


def docs_repository(root):
    """Write MLServer's docs' three models under ``root``; {name: (estimator, test rows FP32)}."""
    import joblib

    out = {}
    for name, (folder, settings, file, data, kind) in DOCS_MODELS.items():
        x, y = dataset(data)
        est = docs_estimator(kind, x, y)
        path = os.path.join(root, folder)
        os.makedirs(path, exist_ok=True)
        joblib.dump(est, os.path.join(path, file))
        with open(os.path.join(path, SETTINGS), "w") as f:
            json.dump(settings, f, indent=4)
        out[name] = (est, x[len(x) // 2:][::37][:6].astype(np.float32))
    return out


def docs_requests(models):
    """The v2 requests both servers get: (label, path, body) — a single row as the docs send it (nested
    ``x_0.tolist()``, input "predict", FP32), then several rows; with the version in the path where the docs
    give one, and without it."""
    out = []
    for name, (_, rows) in models.items():
        version = DOCS_MODELS[name][1].get("parameters", {}).get("version")
        paths = [f"/v2/models/{name}/versions/{version}/infer"] if version else []
        paths.append(f"/v2/models/{name}/infer")
        for path in paths:
            for label, x in (("1 row", rows[:1]), (f"{len(rows)} rows", rows)):
                body = {"inputs": [{"name": "predict", "shape": list(x.shape), "datatype": "FP32",
                                    "data": x.tolist()}]}
                out.append((f"{path} {label}", path, body))
    return out
