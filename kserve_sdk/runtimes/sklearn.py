"""``python -m kserve_sdk.runtimes.sklearn --model_dir DIR --model_name NAME``: serve a saved scikit-learn model.

The model is the one ``.joblib``, ``.pkl`` or ``.pickle`` file in ``DIR``, loaded with joblib, as KServe's
sklearnserver does. ``PREDICT_PROBA=true`` answers ``predict_proba`` (class probabilities) instead of
``predict`` for models that have it. Needs ``pip install 'kserve-sdk[sklearn]'``.
"""
from typing import Any, Optional

from .extras import import_extra
from .tabular import TabularModel, env_flag

MODEL_EXTENSIONS = (".joblib", ".pkl", ".pickle")
ENV_PREDICT_PROBA = "PREDICT_PROBA"


class SKLearnModel(TabularModel):
    """A scikit-learn estimator or pipeline saved with joblib or pickle."""

    runtime = "sklearn"
    extensions = MODEL_EXTENSIONS

    def load_file(self, path: str) -> Optional[int]:
        joblib = import_extra("joblib", "sklearn")
        import_extra("sklearn", "sklearn")
        self._model = joblib.load(path)
        self.use_proba = env_flag(ENV_PREDICT_PROBA) and hasattr(self._model, "predict_proba")
        return getattr(self._model, "n_features_in_", None)

    def predict_rows(self, rows: Any) -> Any:
        return self._model.predict_proba(rows) if self.use_proba else self._model.predict(rows)


if __name__ == "__main__":
    from .cli import main

    main(lambda args: SKLearnModel(args.model_name, args.model_dir), __doc__)
