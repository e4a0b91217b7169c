"""`CrmEvent.parse` against the pydantic model it replaced (a test-only oracle).

`pipeline.crm.event_model` took pydantic off the `sms` consumer's first invocation (docs/perf.md).
A CRM's event must be accepted and refused as the model did, with the same fields named (the
webhook's 422 body lists them, the dead-letter reason too), a phone refused with the same type
(`invalid_phone` is alarmed apart), and read to the same values: the moment (`AwareDatetime`
reads RFC 3339 in several spellings and Unix times), the phone in E.164, the fields a CRM added.
The models below are release 0.5.0's, verbatim but for their names; Hypothesis searches
JSON-shaped events for a difference.

Two differences are deliberate, both in Unix times, which no CRM of ours sends: pydantic reads a
negative one with a fraction a second wrong (-1.75 as 1969-12-31T23:59:58.75), `CrmEvent` right
(…58.25), so the generator gives only whole negative times; and a fraction of a microsecond may
round the other way (pydantic half up, Python half to even), so moments agree within 1 µs.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime, timedelta, timezone
from typing import Any, Literal

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from pydantic import (
    AwareDatetime,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
)
from pydantic_core import PydanticCustomError

from pipeline import phones
from pipeline.crm.contract import PHONE_ERROR_TYPE
from pipeline.crm.event_model import CrmEvent
from pipeline.envelope import crm_order_key
from pipeline.validation import Invalid
from tests.unit.webhook.support import CRM_ORDER_EVENT, load_fixture

PHONE_REGION_CONTEXT = "phone_default_region"


class _Open(BaseModel):
    model_config = ConfigDict(defer_build=True, extra="allow", frozen=True, hide_input_in_errors=True)


class OracleOrder(_Open):
    id: str = Field(min_length=1, max_length=128)
    status: str = Field(min_length=1, max_length=64, pattern=r"^[^\x00-\x1f\x7f]+$")
    previous_status: str | None = Field(default=None, max_length=64)
    transition_id: str | None = Field(default=None, min_length=1, max_length=256)


class OracleCustomer(_Open):
    phone: str = Field(max_length=64, description="E.164 once validated")
    name: str = Field(max_length=256)

    @field_validator("phone")
    @classmethod
    def _e164(cls, value: str, info: ValidationInfo) -> str:
        context = info.context if isinstance(info.context, Mapping) else {}
        try:
            return phones.to_e164(value, context.get(PHONE_REGION_CONTEXT))
        except phones.PhoneNumberError as error:
            raise PydanticCustomError(PHONE_ERROR_TYPE, str(error)) from None


class OracleCrmEvent(_Open):
    event_id: str = Field(min_length=1, max_length=256)
    type: Literal["order.status_changed"]
    occurred_at: AwareDatetime
    order: OracleOrder
    customer: OracleCustomer

    @property
    def order_key(self) -> str:
        return crm_order_key(
            {"order": {"id": self.order.id}, "source": (self.model_extra or {}).get("source")}
        )


def outcome(parse: Any) -> tuple[Any, set[tuple[Any, str]]]:
    """(what `parse()` returned, None if refused; each refusal's location, and its type when it is
    the phone's own: the webhook answers and alarms on that one apart)."""
    try:
        return parse(), set()
    except (ValidationError, Invalid) as error:
        return None, {
            (tuple(item["loc"]), item["type"] if item["type"] == PHONE_ERROR_TYPE else "")
            for item in error.errors(include_input=False)
        }


json_leaf = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=4)
)
json_value = st.recursive(
    json_leaf,
    lambda inner: st.lists(inner, max_size=2) | st.dictionaries(st.text(max_size=3), inner, max_size=2),
    max_leaves=4,
)


def _spelled(moment: datetime, separator: str, zone: str, seconds: str, fraction: str) -> str:
    text = moment.strftime(f"%Y-%m-%d{separator}%H:%M")
    if seconds:
        text += moment.strftime(":%S") + fraction
    return text + zone


zones = st.sampled_from(
    [
        "Z",
        "z",
        "+00:00",
        "-00:00",
        "+03:00",
        "+0300",
        "-05:30",
        "+23:59",
        "+24:00",
        "+03:60",
        "+0060",
        "+03",
        "",
        " Z",
    ]
)
moments = st.datetimes(min_value=datetime(1971, 1, 1), max_value=datetime(2100, 1, 1))
rfc3339 = st.builds(
    _spelled,
    moments,
    st.sampled_from(["T", "t", " ", "_", "x"]),
    zones,
    st.sampled_from([":", ""]),
    st.sampled_from(["", ".5", ",25", ".123456", ".1234567891", "."]),
)
unix_times = (
    st.integers(min_value=-(2 * 10**10) - 5, max_value=2 * 10**10 + 5)
    | st.sampled_from(
        [0, -1, 2 * 10**10, 2 * 10**10 + 1, 1_700_000_000_123, 253_402_300_799_999, 253_402_300_800_000]
    )
    | st.floats(min_value=0, max_value=1e11, allow_nan=False).map(lambda x: round(x, 3))
)
unix_texts = unix_times.map(str) | st.sampled_from(
    ["1.", ".5", "-1.5", "+17", "1.5e3", "1e3", "1E3", "1_0", " 1", "nan"]
)
occurred = (
    rfc3339
    | unix_times
    | unix_texts
    | st.sampled_from(["2026-02-30T00:00:00Z", "2026-01-02T24:00:00Z", "2026-01-02T03:04:60Z", "2026-01-02"])
    | st.builds(
        lambda moment, zone: moment.replace(tzinfo=zone).isoformat(),
        moments,
        st.sampled_from([None, UTC, timezone(timedelta(hours=-3))]),
    )
    | st.none()
    | st.booleans()
    | st.text(max_size=4)
    | st.lists(st.integers(), max_size=1)
)
bounded_texts = st.sampled_from(
    [
        "",
        "x",
        "shipped",
        "a\nb",
        "shipped\n",
        "\x7f",
        "Отгружен",
        "x" * 64,
        "x" * 65,
        "x" * 128,
        "x" * 129,
        "x" * 256,
        "x" * 257,
    ]
) | st.text(max_size=5)
phone_forms = st.sampled_from(
    [
        "+491701234567",
        "+375 29 123-45-67",
        "8 029 123-45-67",
        "80291234567",
        "+12345",
        "call me",
        "",
        "+999 1234567",
        "+375 11 111-11-11",
        "+" + "1" * 70,
    ]
)
orders = st.fixed_dictionaries(
    {},
    optional={
        "id": bounded_texts | json_leaf,
        "status": bounded_texts | json_leaf,
        "previous_status": bounded_texts | st.none() | json_leaf,
        "transition_id": bounded_texts | st.none(),
        "tracking_number": json_value,
    },
)
customers = st.fixed_dictionaries(
    {},
    optional={
        "phone": phone_forms | json_leaf,
        "name": bounded_texts | json_leaf,
        "language": st.sampled_from(["ru", "de-AT", 3]),
    },
)
valid_order = st.fixed_dictionaries(
    {"id": st.sampled_from(["ORD-1", "x" * 128]), "status": st.sampled_from(["shipped", "Отгружен"])},
    optional={
        "previous_status": st.sampled_from([None, "paid", ""]),
        "transition_id": st.sampled_from(["h-1", None]),
    },
)
events = st.fixed_dictionaries(
    {},
    optional={
        "event_id": bounded_texts | json_leaf,
        "type": st.sampled_from(["order.status_changed", "order.created", ""]) | json_leaf,
        "occurred_at": occurred,
        "order": orders | valid_order | json_leaf,
        "customer": customers | json_leaf,
        "source": st.sampled_from([{"crm": "bitrix24"}, "x", None]) | json_value,
        "crm": json_value,
    },
)
# Mostly events that are nearly valid: the fixture with a few fields replaced.
nearly_valid = st.builds(
    lambda changes: {**load_fixture(CRM_ORDER_EVENT), **changes},
    st.fixed_dictionaries(
        {},
        optional={
            "occurred_at": occurred,
            "order": st.builds(lambda base, changes: {**base, **changes}, valid_order, orders),
            "customer": customers.map(lambda customer: {"phone": "+491701234567", "name": "A", **customer}),
            "source": st.sampled_from([{"crm": "bitrix24"}, {"crm": "amocrm", "account": 7}]),
        },
    ),
)


def _changed(path: tuple[str, ...], value: Any) -> dict[str, Any]:
    data = load_fixture(CRM_ORDER_EVENT)
    *parents, leaf = path
    target = data
    for parent in parents:
        target = target[parent]
    target[leaf] = value
    return data


def around(length: int) -> st.SearchStrategy[Any]:
    """Texts at a length bound, and what is no text."""
    bounds = st.sampled_from(["", "x", "x" * (length - 1), "x" * length, "x" * (length + 1), "Ж" * length])
    return bounds | json_leaf


# The fixture with one field replaced: every bound and form of each field, the others valid.
one_change = st.one_of(
    *(
        st.builds(_changed, st.just(path), values)
        for path, values in [
            (("event_id",), around(256)),
            (("type",), st.sampled_from(["order.status_changed", "order.created", ""]) | json_leaf),
            (("occurred_at",), rfc3339),
            (("occurred_at",), occurred),
            (("order", "id"), around(128)),
            (
                ("order", "status"),
                around(64) | st.sampled_from(["a\nb", "shipped\n", "\x7f", "\x1f", "Отгружен"]),
            ),
            (("order", "previous_status"), around(64)),
            (("order", "transition_id"), around(256)),
            (("customer", "phone"), phone_forms | json_leaf),
            (("customer", "name"), around(256)),
        ]
    )
)


def _same_event(got: CrmEvent, expected: OracleCrmEvent, payload: dict[str, Any]) -> None:
    assert (got.event_id, got.type) == (expected.event_id, expected.type)
    assert abs(got.occurred_at - expected.occurred_at) <= timedelta(microseconds=1)
    assert got.occurred_at.utcoffset() == expected.occurred_at.utcoffset()
    assert vars(got.order) == {
        **expected.order.model_dump(exclude=set(expected.order.model_extra or {})),
        "extra": expected.order.model_extra,
    }
    assert (got.customer.phone, got.customer.name) == (expected.customer.phone, expected.customer.name)
    assert got.customer.extra == expected.customer.model_extra
    assert got.extra == expected.model_extra
    assert got.order_key == expected.order_key
    for name, value in expected.order.model_dump().items():
        assert got.order.value(name) == value
    assert got.customer.value("language") == expected.customer.model_dump().get("language")
    customer = {**payload["customer"], "phone": expected.customer.phone}
    assert got.normalised_payload(payload) == {**payload, "customer": customer}


@given(data=events | nearly_valid | one_change, region=st.sampled_from([None, "BY", "DE"]))
@settings(max_examples=1000)
@example(data={**load_fixture(CRM_ORDER_EVENT), "occurred_at": "1.5e3"}, region=None)
@example(data={**load_fixture(CRM_ORDER_EVENT), "occurred_at": "1e3"}, region=None)
@example(data={**load_fixture(CRM_ORDER_EVENT), "order": {"id": "1", "status": "shipped\n"}}, region=None)
def test_a_crm_event_is_read_as_the_pydantic_model_read_it(data: dict[str, Any], region: str | None) -> None:
    expected, expected_refusals = outcome(
        lambda: OracleCrmEvent.model_validate(data, context={PHONE_REGION_CONTEXT: region})
    )
    got, refusals = outcome(lambda: CrmEvent.parse(data, phone_default_region=region))
    assert (got is None, refusals) == (expected is None, expected_refusals)
    if expected is not None:
        _same_event(got, expected, data)


@pytest.mark.parametrize("written", ["+375 29 123-45-67", "8 029 123-45-67", "call me", "+" + "1" * 70])
def test_a_refused_phone_is_never_quoted(written: str) -> None:
    data = {**load_fixture(CRM_ORDER_EVENT), "customer": {"phone": written, "name": "A"}}
    try:
        CrmEvent.parse(data)
    except Invalid as error:
        digits = "".join(char for char in written if char.isdigit())
        assert written not in str(error)
        assert not digits or digits not in str(error)
        assert all("input" not in item for item in error.errors())
    else:
        assert written.startswith("+375")  # an international form needs no region
