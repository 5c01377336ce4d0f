"""REST wire vocabularies beside KServe v1 and v2, at KServe's import paths (``timeseries``)."""
