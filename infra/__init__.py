"""CDK (Python) infrastructure of the pipeline, one construct per concern under `infra.constructs`."""
