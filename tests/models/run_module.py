"""``python tests/models/run_module.py ARGS`` runs module $RUN_MODULE as ``python -m $RUN_MODULE ARGS`` would:
the conftest ``Server`` helper starts scripts, and this lets it start a ``python -m`` entry point."""
import os
import runpy
import sys

sys.path[0] = os.getcwd()  # as -m puts the working directory first, not this file's folder
runpy.run_module(os.environ["RUN_MODULE"], run_name="__main__", alter_sys=True)
