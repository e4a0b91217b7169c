"""Fixtures for the tests in each consumer's folder (`functions/<name>/tests/`): the ones the
pipeline's own consumer tests use, so a consumer's test runs its real handler through the worker
runtime on moto queues (`run_consumer`), against the vendors' stand-ins. Never shipped to Lambda
(`infra.paths.ASSET_EXCLUDES`)."""

from __future__ import annotations

from tests.conftest import _load_service_models_once  # and the process-wide defaults (no real AWS account)
from tests.unit.conftest import aws_env, deploy, import_app, lambda_context, moto_aws, output
from tests.unit.consumers.conftest import (
    http_fake,
    put_secret,
    run_consumer,
    telegram,
)

__all__ = [
    "_load_service_models_once",
    "aws_env",
    "deploy",
    "http_fake",
    "import_app",
    "lambda_context",
    "moto_aws",
    "output",
    "put_secret",
    "run_consumer",
    "telegram",
]
