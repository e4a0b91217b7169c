"""The local moto server finds each host's backend once (`local.moto_process.route_each_host_once`)
and lists each response class's methods once (`list_response_methods_once`).

moto's dispatcher lists its package directory and matches hundreds of URL patterns for every
request, under a lock every request takes; the answer for a host never changes. Its responses list
their class's functions for every request, to see whether the action is one of them.
"""

from __future__ import annotations

from typing import Any

import pytest
from moto import backends
from moto.core import responses, utils
from moto.dynamodb.responses import DynamoHandler
from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app
from moto.sqs.responses import SQSResponse

from local.moto_process import list_response_methods_once, route_each_host_once


def signed_request(service: str, target: str) -> dict[str, Any]:
    credential = f"Credential=test/20261203/eu-central-1/{service}/aws4_request"
    return {
        "PATH_INFO": "/",
        "REQUEST_METHOD": "POST",
        "HTTP_HOST": "127.0.0.1:5000",
        "HTTP_AUTHORIZATION": f"AWS4-HMAC-SHA256 {credential}, SignedHeaders=host, Signature=0",
        "HTTP_X_AMZ_TARGET": target,
        "CONTENT_TYPE": "application/x-amz-json-1.0",
        "CONTENT_LENGTH": "0",
    }


@pytest.fixture
def listings(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts each listing of moto's backends; the dispatcher's lookup comes back after the test."""
    monkeypatch.setattr(
        DomainDispatcherApplication, "get_backend_for_host", DomainDispatcherApplication.get_backend_for_host
    )
    counted: list[int] = []
    listing = backends.list_of_moto_modules

    def count() -> Any:
        counted.append(1)
        return listing()

    monkeypatch.setattr(backends, "list_of_moto_modules", count)
    return counted


def test_each_host_is_looked_up_once_and_routed_as_moto_routes_it(listings: list[int]) -> None:
    unpatched = DomainDispatcherApplication(create_backend_app)
    expected = {
        service: unpatched.get_backend_for_host(
            unpatched.infer_service_region_host(signed_request(service, t), "/")
        )
        for service, t in (("sqs", "AmazonSQS.ReceiveMessage"), ("dynamodb", "DynamoDB_20120810.PutItem"))
    }
    route_each_host_once()
    route_each_host_once()  # applying the patches twice (tests do) wraps the lookup once
    app = DomainDispatcherApplication(create_backend_app)
    listings.clear()

    for _ in range(3):
        for service, target in (
            ("sqs", "AmazonSQS.ReceiveMessage"),
            ("dynamodb", "DynamoDB_20120810.PutItem"),
        ):
            routed = app.get_application(signed_request(service, target))
            assert routed is app.app_instances[expected[service]]

    assert len(listings) == 2  # one per host


def test_each_response_class_s_methods_are_listed_once_as_moto_lists_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    listed: list[type] = []

    def listing(clazz: type) -> list[str]:
        listed.append(clazz)
        return utils.method_names_from_class(clazz)

    monkeypatch.setattr(responses, "method_names_from_class", listing)  # moto's own, restored after
    list_response_methods_once()
    list_response_methods_once()  # applying the patches twice (tests do) wraps the listing once

    for _ in range(3):
        for clazz in (SQSResponse, DynamoHandler):
            names = responses.method_names_from_class(clazz)
            assert names == utils.method_names_from_class(clazz)
            assert "receive_message" in names or "put_item" in names
    assert listed == [SQSResponse, DynamoHandler]
