"""The folder `trace-capture` puts first on PYTHONPATH; only its `sitecustomize` matters."""
