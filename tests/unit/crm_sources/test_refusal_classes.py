"""The classification table, searched: which answers of the CRMs' APIs are about one message
(a RemoteRefused: dead-lettered or ignored), about the whole account (AccountRefused: paused)
or passing (TransientError: retried). A generated answer in the wrong class is a message
dead-lettered that should have waited, or a whole account's flood in the DLQ."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipeline.crm.amocrm import ACCOUNT_STATUSES, AmoCrmApi
from pipeline.crm.bitrix24 import BITRIX_ACCOUNT_ERRORS, BITRIX_TRANSIENT_ERRORS, Bitrix24Rest
from pipeline.errors import AccountRefused, RemoteRefused, TransientError
from tests.unit.consumers.conftest import FakeHttpServer, Scripted

ERROR_STATUSES = st.sampled_from([*range(300, 305), *range(400, 432), *range(500, 512)])
# Vendor-looking error codes that are not the portal's account errors (upper or lower case).
OTHER_CODES = st.sampled_from(
    ["", "NOT_FOUND", "ERROR_CORE", "INVALID_ARG_VALUE", "INVALID_CREDENTIALS", "insufficient_scope"]
)
SLOW = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


# A 403's detail: the account blocked (amoCRM's documented 403s: blocked, this IP refused) or not.
ACCOUNT_403_DETAILS = ("Account is blocked", "Аккаунт заблокирован", "Access from this IP is denied")
OTHER_403_DETAILS = ("Access denied", "some detail", "Forbidden")


def amocrm_class(http_fake: FakeHttpServer, status: int, detail: str = "some detail") -> type[Exception]:
    http_fake.respond(Scripted(status, {"title": "Some title", "detail": detail}))
    try:
        AmoCrmApi(http_fake.base_url, "t0ken").lead(1)
    except (AccountRefused, RemoteRefused, TransientError) as error:
        return type(error)
    raise AssertionError(f"HTTP {status} was not refused")


@SLOW
@given(status=ERROR_STATUSES, detail=st.sampled_from(ACCOUNT_403_DETAILS + OTHER_403_DETAILS))
def test_amocrm_an_answer_is_about_the_account_exactly_when_its_status_is_401_402_or_a_blocked_403(
    http_fake: FakeHttpServer, status: int, detail: str
) -> None:
    found = amocrm_class(http_fake, status, detail)
    if status == 403:
        # Any other 403 is about the lead: a lead hidden from the token's user is not a blocked account.
        assert found is (AccountRefused if detail in ACCOUNT_403_DETAILS else RemoteRefused)
    elif status in ACCOUNT_STATUSES:
        assert found is AccountRefused
    elif status in (408, 429) or status >= 500:
        assert found is TransientError
    else:
        assert issubclass(found, RemoteRefused)


def bitrix_error(http_fake: FakeHttpServer, status: int, body: Any) -> Exception:
    http_fake.respond(Scripted(status, body))
    try:
        Bitrix24Rest(f"{http_fake.base_url}/rest/1/c0de/").deal(1)
    except (AccountRefused, RemoteRefused, TransientError) as error:
        return error
    raise AssertionError(f"HTTP {status} {body} was not refused")


@SLOW
@given(
    status=st.sampled_from([200, 400, 401, 403, 500, 503]),
    code=st.sampled_from(sorted(BITRIX_ACCOUNT_ERRORS)),
    lower=st.booleans(),
)
def test_bitrix24_an_account_error_code_pauses_whatever_the_status(
    http_fake: FakeHttpServer, status: int, code: str, lower: bool
) -> None:
    error = bitrix_error(
        http_fake, status, {"error": code.lower() if lower else code, "error_description": "x"}
    )
    assert isinstance(error, AccountRefused) and error.cause == BITRIX_ACCOUNT_ERRORS[code]


@SLOW
@given(
    status=ERROR_STATUSES.filter(lambda status: status != 401), code=OTHER_CODES, text=st.text(max_size=40)
)
def test_bitrix24_any_other_error_is_never_the_account_unless_401(
    http_fake: FakeHttpServer, status: int, code: str, text: str
) -> None:
    """Per-entity refusals ("Access denied" to one deal, a deal not found) stay one message's."""
    error = bitrix_error(http_fake, status, {"error": code, "error_description": text or "Access denied"})
    assert not isinstance(error, AccountRefused)
    if code.upper() in BITRIX_TRANSIENT_ERRORS or status >= 500 or status == 429:
        assert isinstance(error, TransientError)


@SLOW
@given(code=OTHER_CODES, text=st.text(max_size=40))
def test_bitrix24_a_401_is_the_webhook_code_for_every_call(
    http_fake: FakeHttpServer, code: str, text: str
) -> None:
    error = bitrix_error(http_fake, 401, {"error": code, "error_description": text or "-"})
    assert isinstance(error, AccountRefused) and error.cause in ("unauthorized", "unpaid")
