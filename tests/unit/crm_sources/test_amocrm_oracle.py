"""`pipeline.crm.amocrm`'s documents against the pydantic models they replaced (a test-only oracle).

The amoCRM webhook's account and entries and the API v4 answers (lead, contact, status event) are
checked by `pipeline.validation` so the webhook's amoCRM route loads no pydantic (docs/perf.md).
They must accept and refuse as the models did, naming the same fields (pydantic names the alias,
`id`, when it is used) with the same types and messages (the webhook's answer quotes `msg`, an API
refusal's reason lists the fields), and read the same values: every field, `Contact.phone()`,
and the dicts the webhook publishes (`to_payload()`, the JSON `model_dump` gave, keys in order).
The models below are those of `pipeline.crm.amocrm` before the change, verbatim but for their
names; Hypothesis searches amoCRM-shaped forms and answers, and single fields changed, for a
difference.

pydantic strips a leading zero before a sign (it reads "0-5" as -5, "00_0-5" too); the shared
reader (`pipeline.lax`) keeps that quirk, checked against pydantic itself in
tests/unit/test_validation_numbers.py, and no amoCRM form or answer carries such a text, so the
generators here never write a sign after a zero.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import asdict
from datetime import UTC, datetime
from typing import Any

from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from pipeline.crm.amocrm import (
    Account,
    Contact,
    Lead,
    StatusChange,
    StatusEvent,
    _field_errors,
    _form_name,
)
from pipeline.validation import Invalid


# -- the oracle: the pydantic models, verbatim but for their names --------------------------------
class _Model(BaseModel):
    model_config = ConfigDict(
        defer_build=True, frozen=True, hide_input_in_errors=True, populate_by_name=True, extra="ignore"
    )


def _blank_is_none(value: Any) -> Any:
    return None if value is None or (isinstance(value, str) and not value.strip()) else value


def _unix_time(value: Any) -> datetime | None:
    """A unix time (int or digit string) as an aware UTC datetime; 0 and blanks as None."""
    value = _blank_is_none(value)
    if value is None:
        return None
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value.strip())
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError("not a unix time")
    if value == 0:
        return None
    try:
        return datetime.fromtimestamp(value, tz=UTC)
    except (ValueError, OverflowError, OSError):
        raise ValueError("not a unix time in range") from None


class OracleAccount(_Model):
    """`account[id]`, `account[subdomain]` of a webhook."""

    id: int | None = None
    subdomain: str | None = None

    @field_validator("id", "subdomain", mode="before")
    @classmethod
    def _optional(cls, value: Any) -> Any:
        return _blank_is_none(value)


class OracleStatusChange(_Model):
    """One `leads[status][<n>]` entry: the lead moved to `status_id` in `pipeline_id`."""

    lead_id: int = Field(alias="id", gt=0)
    status_id: int
    pipeline_id: int
    old_status_id: int | None = None
    old_pipeline_id: int | None = None

    @field_validator("old_status_id", "old_pipeline_id", mode="before")
    @classmethod
    def _optional(cls, value: Any) -> Any:
        return _blank_is_none(value)


class OracleLead(_Model):
    """A `GET /api/v4/leads/<id>?with=contacts` answer."""

    id: int = Field(gt=0)
    name: str = ""
    status_id: int
    pipeline_id: int
    updated_at: datetime | None = None
    # `_embedded.contacts[]`: the one with `is_main: true`, else the first.
    main_contact_id: int | None = None

    @model_validator(mode="before")
    @classmethod
    def _main_contact(cls, data: Any) -> Any:
        if not isinstance(data, Mapping) or "main_contact_id" in data:
            return data
        embedded = data.get("_embedded")
        contacts = embedded.get("contacts") if isinstance(embedded, Mapping) else None
        linked = [c for c in contacts if isinstance(c, Mapping)] if isinstance(contacts, list) else []
        main = next((c for c in linked if c.get("is_main") is True), linked[0] if linked else None)
        return {**data, "main_contact_id": main.get("id") if main is not None else None}

    @field_validator("name", mode="before")
    @classmethod
    def _name(cls, value: Any) -> Any:
        return "" if value is None else value

    @field_validator("updated_at", mode="before")
    @classmethod
    def _time(cls, value: Any) -> Any:
        return _unix_time(value)

    @classmethod
    def from_api(cls, body: Mapping[str, Any]) -> OracleLead:
        return cls.model_validate(body)


def _lead_status(values: Any) -> tuple[int, int] | None:
    """`(pipeline_id, status_id)` of an event's `value_after`/`value_before`
    (`[{"lead_status": {"id": 142, "pipeline_id": 7}}]`), None when it names none."""
    for value in values if isinstance(values, list) else []:
        status = value.get("lead_status") if isinstance(value, Mapping) else None
        if isinstance(status, Mapping):
            status_id, pipeline_id = status.get("id"), status.get("pipeline_id")
            if isinstance(status_id, int) and isinstance(pipeline_id, int):
                return pipeline_id, status_id
    return None


class OracleStatusEvent(_Model):
    """One `lead_status_changed` event of `GET /api/v4/events`: lead `entity_id` entered status
    `after` (pipeline, status) from `before` at `created_at`. `id` is amoCRM's own (a string)."""

    id: str = Field(min_length=1, max_length=64)
    type: str
    entity_id: int = Field(gt=0)
    created_at: datetime
    after: tuple[int, int]
    before: tuple[int, int] | None = None

    @model_validator(mode="before")
    @classmethod
    def _values(cls, data: Any) -> Any:
        if not isinstance(data, Mapping) or "after" in data:
            return data
        return {
            **data,
            "after": _lead_status(data.get("value_after")),
            "before": _lead_status(data.get("value_before")),
        }

    @field_validator("created_at", mode="before")
    @classmethod
    def _time(cls, value: Any) -> Any:
        return _unix_time(value)


# Phone kinds (`enum_code` of the PHONE field) in the order `Contact.phone` prefers them.
PHONE_PREFERENCE = ("MOB",)


class OracleContact(_Model):
    """A `GET /api/v4/contacts/<id>` answer. `phones` are the values of the PHONE field (as written
    in the CRM, not normalised), `phone_codes` their `enum_code` (WORK, MOB, HOME, ...)."""

    id: int = Field(gt=0)
    name: str | None = None
    phones: tuple[str, ...] = ()
    phone_codes: tuple[str, ...] = ()

    @model_validator(mode="before")
    @classmethod
    def _phone_field(cls, data: Any) -> Any:
        if not isinstance(data, Mapping) or "custom_fields_values" not in data:
            return data
        values: list[str] = []
        codes: list[str] = []
        fields = data["custom_fields_values"]
        for field in fields if isinstance(fields, list) else []:
            if not isinstance(field, Mapping) or field.get("field_code") != "PHONE":
                continue
            entries = field.get("values")
            for entry in entries if isinstance(entries, list) else []:
                value = entry.get("value") if isinstance(entry, Mapping) else None
                if isinstance(value, str) and value.strip():
                    values.append(value.strip())
                    code = entry.get("enum_code")
                    codes.append(code.upper() if isinstance(code, str) else "")
        rest = {key: value for key, value in data.items() if key != "custom_fields_values"}
        return {**rest, "phones": tuple(values), "phone_codes": tuple(codes)}

    @field_validator("name", mode="before")
    @classmethod
    def _optional(cls, value: Any) -> Any:
        return _blank_is_none(value)

    def phone(self) -> str | None:
        """The number to text: the first with enum_code MOB, else the first at all."""
        for preferred in PHONE_PREFERENCE:
            for index, value in enumerate(self.phones):
                if index < len(self.phone_codes) and self.phone_codes[index] == preferred:
                    return value
        return self.phones[0] if self.phones else None

    @classmethod
    def from_api(cls, body: Mapping[str, Any]) -> OracleContact:
        return cls.model_validate(body)


# -- comparing -----------------------------------------------------------------------------------
def outcome(parse: Callable[[], Any]) -> tuple[Any, Any, list[tuple[Any, str, str]]]:
    """(what `parse()` returned, None if refused; the refusal; each refused field's loc, type, msg)."""
    try:
        return parse(), None, []
    except (ValidationError, Invalid) as error:
        items = error.errors(include_input=False)
        # The oracle's class names are Oracle*: "instance of OracleLead" is "instance of Lead".
        return (
            None,
            error,
            [(tuple(item["loc"]), item["type"], item["msg"].replace(" Oracle", " ")) for item in items],
        )


def same(ours: Callable[[], Any], theirs: Callable[[], Any]) -> tuple[Any, Any]:
    """Both parse, or both refuse naming the same fields, types and messages, in the same order."""
    got, got_error, got_errors = outcome(ours)
    expected, _, expected_errors = outcome(theirs)
    assert got_errors == expected_errors
    assert (got is None) == (expected is None)
    event("accepted" if got is not None else "refused")
    if got is not None:
        # repr: a bool read as 1 or a str kept as itself shows where == would not.
        assert repr(tuple(asdict(got).values())) == repr(tuple(expected.model_dump().values()))
        assert list(asdict(got)) == list(expected.model_dump())
    else:
        assert isinstance(got_error, Invalid)
        names = {".".join(str(part) for part in item[0]) or "(whole)" for item in expected_errors}
        assert got_error.field_names() == sorted(names)
    return got, expected


def _no_sign_after_zero(value: Any) -> bool:
    return not (isinstance(value, str) and re.search(r"0[0_]*[-+]", value))


# -- generated input -----------------------------------------------------------------------------
json_leaf = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=4)
)
# One branch of a union, not five: `x | odd_leaf` would pick `x` one time in six.
odd_leaf = json_leaf.map(lambda value: value)
json_value = st.recursive(
    json_leaf,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=2),
    max_leaves=5,
)
ids = st.integers(min_value=1, max_value=99_999_999)
# The texts of a number amoCRM's forms send, and what else a field could carry.
number_texts = st.one_of(
    ids.map(str),
    st.sampled_from(
        [
            "",
            " ",
            "\t",
            "0",
            "-5",
            "+7",
            " 12 ",
            "12\n",
            "\x1c12",
            "\xa012",
            "1.0",
            "1.",
            "0.",
            "1.5",
            "1_000",
            "_1",
            "1__0",
            "\uff11\uff12",  # fullwidth digits
            "٣",
            "²",
            "0x10",
            "1e3",
            "abc",
            "21804135x",
            "9" * 19,
            "9" * 20,
            "1" * 4300,
            "1" * 4301,
            "-" + "1" * 4300,
            " " + "1" * 4301,
            "0" * 4400 + "7",
            "+79123456789",
        ]
    ),
    st.text(alphabet="0123456789 _.+-x", max_size=6).filter(_no_sign_after_zero),
)
# What an API answer's number could be: ints, their texts, floats, bools, nulls.
api_numbers = st.one_of(
    ids,
    number_texts,
    st.sampled_from([0, -1, True, False, None, 1.0, 1.5, 2.0**63, -(2.0**63), float("inf"), float("nan")]),
    st.integers(min_value=-(2**65), max_value=2**65),
    st.floats(min_value=-1e20, max_value=1e20),
)
texts = st.sampled_from(["", " ", "shop", " shop ", "Заказ #1042", "x" * 64, "x" * 65]) | st.text(max_size=5)
unix_times = st.one_of(
    st.integers(min_value=1_600_000_000, max_value=1_800_000_000),
    st.integers(min_value=1_600_000_000, max_value=1_800_000_000).map(str),
    st.sampled_from(
        [
            0,
            "0",
            -1,
            "-1",
            " 17 ",
            "",
            " ",
            None,
            1.5,
            1.0,
            True,
            False,
            10**20,
            "9" * 30,
            "²",
            "٣",
            "abc",
            "1.0",
            [],
            {},
        ]
    ),
)


def _maybe(draw: st.DrawFn, data: dict[str, Any], key: str, values: st.SearchStrategy[Any]) -> None:
    """Set `key` from `values`, or leave it out (a field missing)."""
    if draw(st.integers(0, 9)) > 0:
        data[key] = draw(values)


@st.composite
def form_entries(draw: st.DrawFn) -> dict[str, Any]:
    """One `leads[status][<n>]` entry as `read_status_webhook` hands it on: field name -> text."""
    entry: dict[str, Any] = {}
    for key in ("id", "status_id", "pipeline_id", "old_status_id", "old_pipeline_id"):
        _maybe(draw, entry, key, ids.map(str) | number_texts)
    if draw(st.booleans()) and draw(st.booleans()):
        entry["lead_id"] = draw(number_texts)  # the model's own name for `id` (populate_by_name)
    return entry


@st.composite
def accounts(draw: st.DrawFn) -> dict[str, Any]:
    account: dict[str, Any] = {}
    _maybe(draw, account, "id", number_texts)
    _maybe(draw, account, "subdomain", texts)
    return account


def one_changed(base: dict[str, Any], values: st.SearchStrategy[Any]) -> st.SearchStrategy[dict[str, Any]]:
    """`base` with one of its fields (or one more) given another value, or left out."""

    @st.composite
    def changed(draw: st.DrawFn) -> dict[str, Any]:
        data = dict(base)
        key = draw(st.sampled_from([*base, "main_contact_id", "after", "before", "phones", "lead_id"]))
        if key in data and draw(st.integers(0, 4)) == 0:
            del data[key]
        else:
            data[key] = draw(values)
        return data

    return changed()


FORM_ENTRY = {
    "id": "21804135",
    "status_id": "61482550",
    "pipeline_id": "7391542",
    "old_status_id": "61482546",
    "old_pipeline_id": "7391542",
}
edge_values = number_texts | api_numbers | texts | json_value


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(form_entries() | one_changed(FORM_ENTRY, number_texts | json_value) | json_value)
@example({"id": "0", "status_id": "1", "pipeline_id": "2"})
@example({"id": "5", "status_id": "1", "pipeline_id": "2", "old_status_id": " ", "old_pipeline_id": ""})
@example({"lead_id": "x", "status_id": "1", "pipeline_id": "2"})
@example({"id": "1" * 4301, "status_id": "1.", "pipeline_id": " 1_0 "})
def test_a_webhook_entry_is_read_as_the_model_read_it(entry: Any) -> None:
    got, expected = same(lambda: StatusChange.parse(entry), lambda: OracleStatusChange.model_validate(entry))
    if got is not None:
        theirs = expected.model_dump(by_alias=True)
        assert json.dumps(got.to_payload()) == json.dumps(theirs)
    else:
        _, ours, _ = outcome(lambda: StatusChange.parse(entry))
        _, pydantics, _ = outcome(lambda: OracleStatusChange.model_validate(entry))
        prefix = "leads[status][3]"
        assert list(_field_errors(ours, prefix)) == [
            {"loc": [_form_name(prefix, item["loc"])], "msg": item["msg"].replace(" Oracle", " ")}
            for item in pydantics.errors(include_input=False)
        ]


@settings(max_examples=300, deadline=None)
@given(accounts() | one_changed({"id": "31415926", "subdomain": "exampleshop"}, edge_values) | json_value)
@example({"id": " ", "subdomain": "  "})
@example({"id": "shop"})
def test_a_webhook_account_is_read_as_the_model_read_it(account: Any) -> None:
    got, expected = same(lambda: Account.parse(account), lambda: OracleAccount.model_validate(account))
    if got is not None:
        assert json.dumps(got.to_payload()) == json.dumps(expected.model_dump(mode="json"))


@st.composite
def linked_contacts(draw: st.DrawFn) -> Any:
    """`_embedded.contacts[]`: with and without `is_main`, ids as numbers or texts, odd items."""
    contact = st.fixed_dictionaries(
        {},
        optional={
            "id": ids | api_numbers,
            "is_main": st.sampled_from([True, False, "true", 1, None]),
            "_links": st.just({"self": {"href": "https://shop.amocrm.ru/api/v4/contacts/1"}}),
        },
    )
    return draw(st.lists(contact | odd_leaf, max_size=3) | json_value)


@st.composite
def leads(draw: st.DrawFn) -> dict[str, Any]:
    """`GET /api/v4/leads/<id>?with=contacts`, as the docs show it (fields often of another type)."""
    lead: dict[str, Any] = {"price": 12900, "responsible_user_id": 9081726, "account_id": 31415926}
    _maybe(draw, lead, "id", ids | api_numbers)
    _maybe(draw, lead, "name", texts | st.none() | odd_leaf)
    _maybe(draw, lead, "status_id", ids | api_numbers)
    _maybe(draw, lead, "pipeline_id", ids | api_numbers)
    _maybe(draw, lead, "updated_at", unix_times)
    _maybe(draw, lead, "created_at", unix_times)
    embedded = draw(st.sampled_from(["contacts", "none", "odd", "absent"]))
    if embedded == "contacts":
        lead["_embedded"] = {"tags": [], "contacts": draw(linked_contacts())}
    elif embedded == "none":
        lead["_embedded"] = None
    elif embedded == "odd":
        lead["_embedded"] = draw(json_value)
    if draw(st.integers(0, 9)) == 0:
        lead["main_contact_id"] = draw(api_numbers)
    return lead


LEAD = {
    "id": 21804135,
    "name": "Заказ #1042",
    "status_id": 61482550,
    "pipeline_id": 7391542,
    "updated_at": 1704784507,
    "_embedded": {"contacts": [{"id": 40112233, "is_main": False}, {"id": 40112299, "is_main": True}]},
}


# The main contact alone: which of two or three linked contacts is `is_main` (true, or only truthy).
main_contacts = st.lists(
    st.fixed_dictionaries({"id": ids}, optional={"is_main": st.sampled_from([True, False, "true", 1, None])}),
    min_size=1,
    max_size=3,
).map(lambda linked: {**LEAD, "_embedded": {"contacts": linked}})


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(leads() | main_contacts | one_changed(LEAD, edge_values | unix_times) | json_value)
@example({**LEAD, "updated_at": "²"})
@example({**LEAD, "updated_at": 0})
@example({**LEAD, "updated_at": 10**20})
@example({**LEAD, "name": None, "_embedded": {"contacts": [{"id": 7}, {"id": 8, "is_main": True}]}})
@example({**LEAD, "_embedded": {"contacts": [{"id": "x", "is_main": True}]}})
def test_a_lead_is_read_as_the_model_read_it(lead: Any) -> None:
    same(lambda: Lead.from_api(lead), lambda: OracleLead.from_api(lead))


@st.composite
def lead_statuses(draw: st.DrawFn) -> Any:
    """`value_after`/`value_before`: `[{"lead_status": {"id": 142, "pipeline_id": 7}}]`, or not."""
    status = st.fixed_dictionaries({}, optional={"id": ids | api_numbers, "pipeline_id": ids | api_numbers})
    value = st.fixed_dictionaries({"lead_status": status | odd_leaf}) | odd_leaf
    return draw(st.lists(value, max_size=3) | json_value)


@st.composite
def status_events(draw: st.DrawFn) -> dict[str, Any]:
    event: dict[str, Any] = {"entity_type": "lead", "created_by": 8476412, "account_id": 31415926}
    _maybe(
        draw, event, "id", st.sampled_from(["01hmjz6m7r5q8x1n2c3v4b5n6m", "", "x" * 64, "x" * 65]) | odd_leaf
    )
    _maybe(draw, event, "type", st.sampled_from(["lead_status_changed"]) | odd_leaf)
    _maybe(draw, event, "entity_id", ids | api_numbers)
    _maybe(draw, event, "created_at", unix_times)
    _maybe(draw, event, "value_after", lead_statuses())
    _maybe(draw, event, "value_before", lead_statuses())
    if draw(st.integers(0, 9)) == 0:
        event["after"] = draw(st.lists(api_numbers, max_size=3) | json_value)
        _maybe(draw, event, "before", st.lists(api_numbers, max_size=3) | json_value)
    return event


EVENT = {
    "id": "01hmjz6m7r5q8x1n2c3v4b5n6m",
    "type": "lead_status_changed",
    "entity_id": 21804135,
    "created_at": 1704784507,
    "value_after": [{"lead_status": {"id": 61482550, "pipeline_id": 7391542}}],
    "value_before": [{"lead_status": {"id": 61482546, "pipeline_id": 7391542}}],
}


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(status_events() | one_changed(EVENT, edge_values | unix_times | lead_statuses()) | json_value)
@example({**EVENT, "created_at": 0})
@example({**EVENT, "value_before": []})
@example({**EVENT, "after": [1, "2"], "before": "x"})
@example({**EVENT, "after": [1]})
@example({**EVENT, "value_after": [{"lead_status": {"id": True, "pipeline_id": 2}}]})
def test_a_status_event_is_read_as_the_model_read_it(event: Any) -> None:
    same(lambda: StatusEvent.parse(event), lambda: OracleStatusEvent.model_validate(event))


@st.composite
def phone_fields(draw: st.DrawFn) -> Any:
    """`custom_fields_values`: PHONE fields (values with enum codes) among others, or not a list."""
    real_entry = st.fixed_dictionaries(
        {"value": st.sampled_from(["+7 912 345-67-89", " +7 495 123-45-67 ", "8 912 3456789", "", " "])},
        optional={
            "enum_id": ids,
            "enum_code": st.sampled_from(["MOB", "mob", "WORK", "HOME", ""]) | odd_leaf,
        },
    )
    odd_entry = st.fixed_dictionaries({}, optional={"value": odd_leaf, "enum_code": odd_leaf})
    real_field = st.fixed_dictionaries(
        {
            "field_code": st.sampled_from(["PHONE", "PHONE", "EMAIL", "phone"]),
            "values": st.lists(real_entry, max_size=3),
        },
        optional={"field_id": ids, "field_name": st.just("Телефон")},
    )
    odd_field = st.fixed_dictionaries(
        {"field_code": st.sampled_from(["PHONE", None])},
        optional={"values": st.lists(real_entry | odd_entry | odd_leaf, max_size=3) | json_value},
    )
    field = real_field | odd_field
    return draw(st.lists(field | odd_leaf, max_size=3) | json_value)


@st.composite
def contacts(draw: st.DrawFn) -> dict[str, Any]:
    contact: dict[str, Any] = {"first_name": "Иван", "account_id": 31415926}
    _maybe(draw, contact, "id", ids | api_numbers)
    _maybe(draw, contact, "name", texts | odd_leaf)
    _maybe(draw, contact, "custom_fields_values", phone_fields())
    if "custom_fields_values" not in contact or draw(st.integers(0, 9)) == 0:
        _maybe(draw, contact, "phones", st.lists(texts | odd_leaf, max_size=3) | json_value)
        _maybe(draw, contact, "phone_codes", st.lists(texts | odd_leaf, max_size=3) | json_value)
    return contact


CONTACT = {
    "id": 40112299,
    "name": "Иван Петров",
    "custom_fields_values": [
        {
            "field_code": "PHONE",
            "values": [
                {"value": "+7 495 123-45-67", "enum_code": "WORK"},
                {"value": "+7 912 345-67-89", "enum_code": "MOB"},
            ],
        }
    ],
}


# The phones alone: a valid contact with generated PHONE (and other) fields.
phone_contacts = phone_fields().map(lambda fields: {**CONTACT, "custom_fields_values": fields})


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(contacts() | phone_contacts | one_changed(CONTACT, edge_values | phone_fields()) | json_value)
@example({**CONTACT, "name": " "})
@example({"id": 1, "phones": ["a", 1], "phone_codes": "x"})
def test_a_contact_is_read_as_the_model_read_it(contact: Any) -> None:
    got, expected = same(lambda: Contact.from_api(contact), lambda: OracleContact.from_api(contact))
    if got is not None:
        assert got.phone() == expected.phone()
