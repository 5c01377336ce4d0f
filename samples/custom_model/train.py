"""Train the iris classifier once and save it beside this file: ``python train.py``.

A scikit-learn LogisticRegression on the iris data that scikit-learn ships (150 flowers, four
measurements in centimetres, three classes). The result, ``model/model.joblib``, is committed, so
serving never trains; run this again only to change the model.
"""
import argparse
import os

import joblib
from sklearn.datasets import load_iris
from sklearn.linear_model import LogisticRegression

HERE = os.path.dirname(os.path.abspath(__file__))


def train() -> LogisticRegression:
    features, labels = load_iris(return_X_y=True)
    # Fitted to the optimum (a tight tolerance), not to scikit-learn's default stopping point: where the
    # solver stops early depends on the machine's floating-point kernels, the optimum does not, so a
    # retrained model matches the committed one on any machine.
    return LogisticRegression(tol=1e-10, max_iter=10000).fit(features, labels)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=os.path.join(HERE, "model", "model.joblib"), help="where to save it")
    args = parser.parse_args()
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    classifier = train()
    joblib.dump(classifier, args.out, compress=3)
    features, labels = load_iris(return_X_y=True)
    print(f"saved {args.out}: training accuracy {classifier.score(features, labels):.3f}")


if __name__ == "__main__":
    main()
