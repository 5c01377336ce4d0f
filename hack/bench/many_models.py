"""N add-one models in one server, for memory_bench.py: what each registered model costs.

    BENCH_IMPL=ours python hack/bench/many_models.py --model_name addone --models 10000 --http_port 8080

The first model is named --model_name (the one the bench's readiness probe and requests use), the
others <model_name>-1 ... <model_name>-(N-1). Every one is addone_model.AddOne, loaded before the
server starts; BENCH_IMPL picks kserve_sdk or KServe as in addone_model.py.
"""

import argparse

from addone_model import AddOne, kserve


def main():
    parent = kserve.model_server.parser
    parser = argparse.ArgumentParser(parents=[parent], add_help=False)
    parser.add_argument("--models", type=int, default=1, help="how many models to register (default 1)")
    args, _ = parser.parse_known_args()
    models = [AddOne(args.model_name if i == 0 else f"{args.model_name}-{i}") for i in range(args.models)]
    for model in models:
        model.load()
    kserve.ModelServer().start(models)


if __name__ == "__main__":
    main()
