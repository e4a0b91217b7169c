"""botocore's known-service check answered by name (`pipeline.aws.ServiceNames`): the same answers.

Before it loads a model botocore asks whether the service is known, and its list walks every
service's folder (about 12 ms for each type of file at every init: docs/perf.md). The session of
`pipeline.aws` answers `in` by looking at that service's folder alone. These tests hold every answer
to a plain loader's list: each name botocore and boto3 ship, for each type of file a client or a
resource loads, names generated around them (Hypothesis), and what an unknown service's error says.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import boto3
import botocore.loaders
import botocore.session
import pytest
from botocore.exceptions import UnknownServiceError
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline import aws

# The files a client (its model and endpoint rules), boto3's resource and a paginator or waiter load.
TYPE_NAMES = ("service-2", "endpoint-rule-set-1", "resources-1", "paginators-1", "waiters-2")
BOTO3_DATA = str(Path(boto3.__file__).parent / "data")


def plain_loader() -> botocore.loaders.Loader:
    """A loader as botocore and boto3 make it (boto3 adds its resource models' folder)."""
    loader = botocore.loaders.create_loader()
    loader.search_paths.append(BOTO3_DATA)
    return loader


def by_name_loader() -> botocore.loaders.Loader:
    loader = plain_loader()
    aws.look_up_services_by_name(loader)
    return loader


PLAIN, BY_NAME = plain_loader(), by_name_loader()
LISTED = {type_name: PLAIN.list_available_services(type_name) for type_name in TYPE_NAMES}
FOLDERS = sorted({name for path in PLAIN.search_paths if os.path.isdir(path) for name in os.listdir(path)})


@pytest.mark.parametrize("type_name", TYPE_NAMES)
def test_every_folder_botocore_and_boto3_ship_is_known_exactly_when_the_list_names_it(type_name: str) -> None:
    known = BY_NAME.list_available_services(type_name)
    assert LISTED[type_name], "the plain loader lists services"
    listed = LISTED[type_name]
    assert [name for name in FOLDERS if name in known] == [name for name in FOLDERS if name in listed]


@pytest.mark.parametrize("type_name", TYPE_NAMES)
def test_read_whole_the_names_are_the_lists(type_name: str) -> None:
    known = BY_NAME.list_available_services(type_name)
    assert list(known) == LISTED[type_name]
    assert len(known) == len(LISTED[type_name]) and known[0] == LISTED[type_name][0]
    assert known == LISTED[type_name]


def near_names() -> st.SearchStrategy[Any]:
    """Names around the shipped ones: each folder, cut, grown, cased, as a path, and any text."""
    folder = st.sampled_from(FOLDERS)
    return st.one_of(
        folder,
        st.tuples(folder, st.integers(1, 8)).map(lambda pair: pair[0][: -pair[1]]),
        st.tuples(folder, st.text(max_size=4)).map("".join),
        folder.map(str.upper),
        st.tuples(folder, st.sampled_from(["/", "/..", "/../sns", os.sep + "2010-03-31"])).map("".join),
        st.sampled_from(["", ".", "..", "../botocore", "sns/2010-03-31", "data", "endpoints", "sdk"]),
        st.text(max_size=20),
        st.none(),
        st.integers(),
    )


@settings(max_examples=400, deadline=None)
@given(name=near_names(), type_name=st.sampled_from(TYPE_NAMES))
def test_any_name_is_known_by_name_exactly_when_the_list_names_it(name: Any, type_name: str) -> None:
    assert (name in BY_NAME.list_available_services(type_name)) is (name in LISTED[type_name])


def test_an_unknown_service_is_refused_naming_every_known_one() -> None:
    session = aws._session()  # every client of a process is built from it
    with pytest.raises(UnknownServiceError) as refused:
        session.create_client("no-such-service", region_name="eu-central-1")
    assert refused.value.kwargs["known_service_names"] == ", ".join(LISTED["service-2"])


def test_the_process_session_looks_up_by_name_once_however_often_it_is_made() -> None:
    """Tests share one loader between sessions (tests/conftest.py): made again, the session's
    loader keeps the one lookup, over botocore's own list."""
    aws.reset_clients()
    try:
        first = aws._session().get_component("data_loader")
        lookup = first.list_available_services
        aws.reset_clients()
        again = aws._session().get_component("data_loader")
    finally:
        aws.reset_clients()
    assert again.list_available_services is lookup
    assert isinstance(lookup("service-2"), aws.ServiceNames)
    assert list(lookup("service-2")) == LISTED["service-2"]


def test_a_loader_without_the_methods_it_relies_on_is_left_as_it_is() -> None:
    class OtherLoader:
        def list_available_services(self, type_name: str) -> list[str]:
            return ["sns"]

    loader = OtherLoader()
    aws.look_up_services_by_name(loader)
    assert loader.list_available_services("service-2") == ["sns"]
    assert "list_available_services" not in vars(loader)


def test_clients_and_the_resource_load_through_the_lookup_without_listing(
    moto_aws: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Building the clients and the DynamoDB resource of a process never walks the services'
    folders: the point of it (what the clients then call is every other test's business)."""
    listed: list[str] = []
    original = botocore.loaders.Loader.list_available_services

    def counted(self: botocore.loaders.Loader, type_name: str) -> list[str]:
        listed.append(type_name)
        return original(self, type_name)  # type: ignore[no-any-return]

    monkeypatch.setattr(botocore.loaders.Loader, "list_available_services", counted)
    monkeypatch.setattr(botocore.session, "get_session", _fresh_loader_session(botocore.session.get_session))
    aws.reset_clients()
    try:
        clients = [aws.client("sns"), aws.client("secretsmanager"), aws.non_retrying_client("sqs")]
        table = aws.resource("dynamodb").Table("prepared")
    finally:
        aws.reset_clients()
    assert listed == []
    assert [client.meta.service_model.service_name for client in clients] == ["sns", "secretsmanager", "sqs"]
    assert table.name == "prepared"


def _fresh_loader_session(make: Any) -> Any:
    """Sessions with a loader of their own (the shared one of tests/conftest.py has listed already)."""

    def get_session(env_vars: Any = None) -> Any:
        session = make(env_vars)
        session.register_component("data_loader", botocore.loaders.create_loader())
        return session

    return get_session
