"""``python -m samples.custom_model [flags]`` serves the iris classifier."""
from .model import main

main()
