"""``python -m kserve_sdk.runtimes.xgboost --model_dir DIR --model_name NAME [--nthread N]``: serve a saved
XGBoost booster.

The model is the one ``.bst``, ``.json`` or ``.ubj`` file in ``DIR`` (``Booster.save_model``), as KServe's
xgbserver finds it; ``--nthread`` (default 1) is the booster's thread count. Needs
``pip install 'kserve-sdk[xgboost]'``.
"""
from typing import Any, Optional

from .extras import import_extra
from .tabular import TabularModel

BOOSTER_FILE_EXTENSIONS = (".bst", ".json", ".ubj")


class XGBoostModel(TabularModel):
    """An XGBoost booster; rows are predicted in place (no DMatrix), as float32 like XGBoost itself."""

    runtime = "xgboost"
    extensions = BOOSTER_FILE_EXTENSIONS
    input_datatype = "FP32"

    def __init__(self, name: str, model_dir: str, nthread: int = 1):
        super().__init__(name, model_dir)
        self.nthread = nthread

    def load_file(self, path: str) -> Optional[int]:
        xgb = import_extra("xgboost", "xgboost")
        self._booster = xgb.Booster(params={"nthread": self.nthread}, model_file=path)
        return self._booster.num_features() or None

    def predict_rows(self, rows: Any) -> Any:
        return self._booster.inplace_predict(rows)


if __name__ == "__main__":
    from .cli import main

    main(lambda args: XGBoostModel(args.model_name, args.model_dir, args.nthread), __doc__, nthread=True)
