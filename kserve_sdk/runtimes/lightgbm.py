"""``python -m kserve_sdk.runtimes.lightgbm --model_dir DIR --model_name NAME [--nthread N]``: serve a saved
LightGBM booster.

The model is the one ``.bst`` or ``.txt`` file in ``DIR`` (``Booster.save_model``); ``--nthread`` (default 1)
is the booster's thread count, as in KServe's lgbserver. v1 rows given as objects are put in the order of
the model's feature names. Needs ``pip install 'kserve-sdk[lightgbm]'``.
"""
from typing import Any, List, Optional

from .extras import import_extra
from .tabular import TabularModel

MODEL_EXTENSIONS = (".bst", ".txt")


class LightGBMModel(TabularModel):
    """A LightGBM booster saved as text."""

    runtime = "lightgbm"
    extensions = MODEL_EXTENSIONS

    def __init__(self, name: str, model_dir: str, nthread: int = 1):
        super().__init__(name, model_dir)
        self.nthread = nthread

    def load_file(self, path: str) -> Optional[int]:
        lgb = import_extra("lightgbm", "lightgbm")
        self._booster = lgb.Booster(params={"nthread": self.nthread}, model_file=path)
        return self._booster.num_feature() or None

    def columns(self) -> Optional[List[str]]:
        return self._booster.feature_name()

    def predict_rows(self, rows: Any) -> Any:
        return self._booster.predict(rows, num_threads=self.nthread)


if __name__ == "__main__":
    from .cli import main

    main(lambda args: LightGBMModel(args.model_name, args.model_dir, args.nthread), __doc__, nthread=True)
