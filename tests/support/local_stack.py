"""The local runtime's resources in an in-process moto, for tests that only need the resources."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import boto3
import pytest
from moto import mock_aws

from local.resources import LocalResources, create_resources
from local.settings import LocalSettings
from pipeline.registry import Consumer

REGION = "eu-central-1"


def moto_client(service: str) -> Any:
    return boto3.client(service, region_name=REGION)


@contextmanager
def local_resources_in_moto(
    settings: LocalSettings, fakes: Mapping[str, str], consumers: tuple[Consumer, ...] | None = None
) -> Iterator[LocalResources]:
    """`create_resources` in a fresh in-process moto, with fake credentials and no endpoint override."""
    with pytest.MonkeyPatch.context() as patch:
        for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
            patch.setenv(name, "testing")
        patch.setenv("AWS_DEFAULT_REGION", REGION)
        patch.delenv("AWS_ENDPOINT_URL", raising=False)
        patch.delenv("AWS_PROFILE", raising=False)
        with mock_aws():
            yield create_resources(moto_client, settings, dict(fakes), consumers)
