"""The Bitrix24 event and REST answers against the pydantic models they replaced (a test-only oracle).

`pipeline.crm.bitrix24` took pydantic off the webhook's Bitrix24 route and the `bitrix24`
function's first invocation (docs/perf.md). A portal's outgoing-webhook form and its
`crm.deal.get`, `crm.contact.get` and `crm.stagehistory.list` results must be accepted and refused
as the models did, with the same locations (the form's names, `data[FIELDS][ID]`,
`auth[application_token]`, and Bitrix24's, `CONTACT_ID`, or a field's own name where a result
used it: the models read those too, `populate_by_name`): the webhook's 422 body and the REST
client's "malformed result (...)" reason list them. Accepted, every field and property must read
the same. The models below are release 0.5.0's, verbatim but for their names; Hypothesis searches
real-shaped input (numbers as strings, blanks, the fields a portal adds, multifields, bad types,
each bound) for a difference.

Deliberate differences, none in anything Bitrix24 sends (the generators stay out of them):
- an integer text of more than 4300 digits: both refuse nearly every one, but pydantic also
  refuses "-" and 4300 digits and accepts 4301 or more zeros (Python's `int` limit is ours);
- Unix times (`pipeline.validation`'s `aware_moment`, see
  tests/unit/webhook/test_crm_event_oracle.py): pydantic reads a negative one with a fraction a
  second wrong, so only whole negative ones are generated; a fraction of a microsecond may round
  the other way, so moments agree within 1 µs;
- input that is no JSON value (bytes, sets, other iterables for `phones`) is not generated: the
  form parser and a JSON answer give none.
"""

from __future__ import annotations

import hmac
from collections.abc import Mapping
from copy import deepcopy
from dataclasses import replace
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

from hypothesis import example, given, settings
from hypothesis import strategies as st
from pydantic import (
    AwareDatetime,
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)

from pipeline.crm.bitrix24 import (
    DEAL_EVENTS,
    PHONE_PREFERENCE,
    Contact,
    Deal,
    OutgoingEvent,
    StageHistoryRecord,
)
from pipeline.crm.forms import parse_form
from pipeline.validation import Invalid
from tests.unit.crm_sources.conftest import fixture_bytes, fixture_json

# -- the oracle: pipeline/crm/bitrix24.py's models at release 0.5.0 -------------------------------

_MISSING = object()


def _dig(form: Mapping[str, Any], *path: str) -> Any:
    node: Any = form
    for key in path:
        if not isinstance(node, Mapping) or key not in node:
            return _MISSING
        node = node[key]
    return node


class OracleOutgoingEvent(BaseModel):
    """One outgoing-webhook request. Built by `from_form`; validation errors name the form fields
    (`data[FIELDS][ID]`, `auth[application_token]`), never their values."""

    model_config = ConfigDict(defer_build=True, frozen=True, hide_input_in_errors=True, populate_by_name=True)

    event: str = Field(alias="event", min_length=1, max_length=128, pattern=r"^[A-Z0-9_]+$")
    deal_id: int = Field(alias="data[FIELDS][ID]", gt=0)
    ts: int | None = Field(default=None, alias="ts", ge=0)
    domain: str | None = Field(default=None, alias="auth[domain]", max_length=253)
    member_id: str | None = Field(default=None, alias="auth[member_id]", max_length=128)
    application_token: SecretStr = Field(alias="auth[application_token]", min_length=1, max_length=256)
    event_handler_id: str | None = Field(default=None, alias="event_handler_id", max_length=64)

    @field_validator("event", mode="before")
    @classmethod
    def _upper(cls, value: Any) -> Any:
        return value.strip().upper() if isinstance(value, str) else value

    @field_validator("ts", "domain", "member_id", "event_handler_id", mode="before")
    @classmethod
    def _blank_is_none(cls, value: Any) -> Any:
        return None if isinstance(value, str) and not value.strip() else value

    @field_validator("application_token", mode="before")
    @classmethod
    def _strip(cls, value: Any) -> Any:
        return value.strip() if isinstance(value, str) else value

    @classmethod
    def from_form(cls, form: Mapping[str, Any]) -> OracleOutgoingEvent:
        """The event in a `parse_form` result; pydantic ValidationError naming the bad fields."""
        fields = {
            "event": _dig(form, "event"),
            "data[FIELDS][ID]": _dig(form, "data", "FIELDS", "ID"),
            "ts": _dig(form, "ts"),
            "auth[domain]": _dig(form, "auth", "domain"),
            "auth[member_id]": _dig(form, "auth", "member_id"),
            "auth[application_token]": _dig(form, "auth", "application_token"),
            "event_handler_id": _dig(form, "event_handler_id"),
        }
        return cls.model_validate({name: value for name, value in fields.items() if value is not _MISSING})

    @property
    def is_deal_event(self) -> bool:
        return self.event in DEAL_EVENTS

    def token_matches(self, expected: str) -> bool:
        """Whether the event carries `expected` as its application token (constant-time)."""
        return bool(expected) and hmac.compare_digest(
            self.application_token.get_secret_value().encode(), expected.encode()
        )


# -- REST answers --------------------------------------------------------------------------------
class _OracleEntity(BaseModel):
    # Bitrix adds fields (UF_CRM_*, PARENT_ID_*) per portal: ignore what is not modelled.
    model_config = ConfigDict(
        defer_build=True, frozen=True, hide_input_in_errors=True, populate_by_name=True, extra="ignore"
    )


def _category_id(value: Any) -> Any:
    """A CATEGORY_ID as text ("0" when blank: the default pipeline)."""
    if value is None or value == "":
        return "0"
    return str(value) if isinstance(value, int) and not isinstance(value, bool) else value


def _empty_is_none(value: Any) -> Any:
    return None if value is None or (isinstance(value, str) and not value.strip()) else value


class OracleDeal(_OracleEntity):
    """A `crm.deal.get` result. `moved_time` (MOVED_TIME) is when the deal entered its current stage."""

    id: int = Field(alias="ID", gt=0)
    title: str = Field(default="", alias="TITLE")
    stage_id: str = Field(alias="STAGE_ID", min_length=1)
    category_id: str = Field(default="0", alias="CATEGORY_ID")
    contact_id: int | None = Field(default=None, alias="CONTACT_ID")
    moved_time: AwareDatetime | None = Field(default=None, alias="MOVED_TIME")
    date_modify: AwareDatetime | None = Field(default=None, alias="DATE_MODIFY")
    opportunity: str | None = Field(default=None, alias="OPPORTUNITY")
    currency_id: str | None = Field(default=None, alias="CURRENCY_ID")

    @field_validator("title", mode="before")
    @classmethod
    def _title(cls, value: Any) -> Any:
        return "" if value is None else value

    @field_validator("category_id", mode="before")
    @classmethod
    def _category(cls, value: Any) -> Any:
        return _category_id(value)

    @field_validator("contact_id", mode="before")
    @classmethod
    def _contact(cls, value: Any) -> Any:
        value = _empty_is_none(value)
        return None if value in (0, "0") else value

    @field_validator("moved_time", "date_modify", "currency_id", mode="before")
    @classmethod
    def _optional(cls, value: Any) -> Any:
        return _empty_is_none(value)

    @field_validator("opportunity", mode="before")
    @classmethod
    def _amount(cls, value: Any) -> Any:
        value = _empty_is_none(value)
        return str(value) if isinstance(value, int | float) and not isinstance(value, bool) else value

    @classmethod
    def from_result(cls, result: Mapping[str, Any]) -> OracleDeal:
        """The deal in `result` (the `result` of a crm.deal.get answer); ValidationError otherwise."""
        return cls.model_validate(result)


class OracleContact(_OracleEntity):
    """A `crm.contact.get` result. `phones` are the PHONE multifield values as written in the CRM
    (not normalised), `phone_types` their VALUE_TYPE (MOBILE, WORK, HOME, ...) at the same index."""

    id: int = Field(alias="ID", gt=0)
    name: str | None = Field(default=None, alias="NAME")
    last_name: str | None = Field(default=None, alias="LAST_NAME")
    phones: tuple[str, ...] = ()
    phone_types: tuple[str, ...] = ()

    @model_validator(mode="before")
    @classmethod
    def _multifield(cls, data: Any) -> Any:
        if not isinstance(data, Mapping) or "PHONE" not in data:
            return data
        entries = data["PHONE"]
        values: list[str] = []
        types: list[str] = []
        for entry in entries if isinstance(entries, list) else []:
            if not isinstance(entry, Mapping):
                continue
            value = entry.get("VALUE")
            if isinstance(value, str) and value.strip():
                values.append(value.strip())
                kind = entry.get("VALUE_TYPE")
                types.append(kind.upper() if isinstance(kind, str) else "")
        rest = {key: value for key, value in data.items() if key != "PHONE"}
        return {**rest, "phones": tuple(values), "phone_types": tuple(types)}

    @field_validator("name", "last_name", mode="before")
    @classmethod
    def _optional(cls, value: Any) -> Any:
        return _empty_is_none(value)

    def phone(self) -> str | None:
        """The number to text: the first MOBILE, else the first WORK, else the first at all."""
        for preferred in PHONE_PREFERENCE:
            for index, value in enumerate(self.phones):
                if index < len(self.phone_types) and self.phone_types[index] == preferred:
                    return value
        return self.phones[0] if self.phones else None

    @property
    def display_name(self) -> str:
        return " ".join(part.strip() for part in (self.name, self.last_name) if part and part.strip())

    @classmethod
    def from_result(cls, result: Mapping[str, Any]) -> OracleContact:
        return cls.model_validate(result)


class OracleStageHistoryRecord(_OracleEntity):
    """One `crm.stagehistory.list` record of a deal (entityTypeId 2): the deal `owner_id` entered
    stage `stage_id` of category `category_id` at `created_time`. Portals write the numbers as
    integers or as strings; both are read."""

    id: int = Field(alias="ID", gt=0)
    type_id: int = Field(alias="TYPE_ID")
    owner_id: int = Field(alias="OWNER_ID", gt=0)
    created_time: AwareDatetime = Field(alias="CREATED_TIME")
    category_id: str = Field(default="0", alias="CATEGORY_ID")
    stage_id: str = Field(alias="STAGE_ID", min_length=1)

    @field_validator("category_id", mode="before")
    @classmethod
    def _category(cls, value: Any) -> Any:
        return _category_id(value)


# -- comparing -----------------------------------------------------------------------------------
def outcome(parse: Any) -> tuple[Any, list[tuple[Any, ...]]]:
    """(what `parse()` returned, None if refused; the refused locations, in order)."""
    try:
        return parse(), []
    except (ValidationError, Invalid) as error:
        return None, [tuple(item["loc"]) for item in error.errors(include_input=False)]


def _same_moment(got: datetime | None, expected: datetime | None) -> None:
    """The same moment (within the 1 µs a Unix time's rounding may differ by) and offset."""
    assert (got is None) == (expected is None)
    if got is not None and expected is not None:
        assert abs(got - expected) <= timedelta(microseconds=1)
        assert got.utcoffset() == expected.utcoffset()


def _same_event(got: OutgoingEvent, expected: OracleOutgoingEvent) -> None:
    token = expected.application_token.get_secret_value()
    assert (got.event, got.deal_id, got.ts, got.domain, got.member_id, got.event_handler_id) == (
        expected.event,
        expected.deal_id,
        expected.ts,
        expected.domain,
        expected.member_id,
        expected.event_handler_id,
    )
    assert got.application_token == token
    assert got.is_deal_event == expected.is_deal_event
    for candidate in (token, token + "x", "", " " + token):
        assert got.token_matches(candidate) == expected.token_matches(candidate)
    # The token never shows: another token gives the same repr and str.
    other = replace(got, application_token="other")
    assert (repr(got), str(got)) == (repr(other), str(other))


def _same_deal(got: Deal, expected: OracleDeal) -> None:
    for name in ("id", "title", "stage_id", "category_id", "contact_id", "opportunity", "currency_id"):
        assert getattr(got, name) == getattr(expected, name), name
        assert type(getattr(got, name)) is type(getattr(expected, name)), name
    _same_moment(got.moved_time, expected.moved_time)
    _same_moment(got.date_modify, expected.date_modify)


def _same_contact(got: Contact, expected: OracleContact) -> None:
    assert (got.id, got.name, got.last_name, got.phones, got.phone_types) == (
        expected.id,
        expected.name,
        expected.last_name,
        expected.phones,
        expected.phone_types,
    )
    assert (got.phone(), got.display_name) == (expected.phone(), expected.display_name)


def _same_record(got: StageHistoryRecord, expected: OracleStageHistoryRecord) -> None:
    assert (got.id, got.type_id, got.owner_id, got.category_id, got.stage_id) == (
        expected.id,
        expected.type_id,
        expected.owner_id,
        expected.category_id,
        expected.stage_id,
    )
    _same_moment(got.created_time, expected.created_time)


# -- generating ----------------------------------------------------------------------------------
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
blanks = st.sampled_from(["", " ", "\t", "\n ", "\u00a0", "\u3000"])
# Bitrix24 writes numbers as strings ("759"); portals differ, and a field may be blank or null.
number_texts = st.sampled_from(
    ["759", "0", "1", "-1", "+5", " 42 ", "00", "007", "1.0", "1.00", "1.5", "1_000", "1__0", "_1", "1e3",
     "0x1F", "\uff11\uff12", "\u0663", "nan", "inf", "-0", "9" * 19, "9" * 40, "1" * 4300, "deal"]
)  # fmt: skip
numbers = (
    number_texts
    | st.integers(min_value=-3, max_value=2**70).map(str)
    | st.integers(min_value=-3, max_value=2**70)
    | st.sampled_from([0.0, 1.0, 759.0, 1.5, -1.0, 1e20, 1e300, float("inf"), float("nan"), True, False])
    | blanks
    | json_value
)


def around(length: int) -> st.SearchStrategy[Any]:
    """Texts at a length bound (padded with spaces too, which some fields strip), and what is no text."""
    bounds = st.sampled_from(
        [
            "",
            "x",
            "x" * (length - 1),
            "x" * length,
            "x" * (length + 1),
            "Ж" * length,
            " " + "x" * length + " ",
        ]
    )
    return bounds | blanks | json_leaf


def _spelled(moment: datetime, separator: str, zone: str) -> str:
    return moment.strftime(f"%Y-%m-%d{separator}%H:%M:%S") + zone


moments = st.datetimes(min_value=datetime(1971, 1, 1), max_value=datetime(2100, 1, 1))
times = (
    st.builds(
        _spelled,
        moments,
        st.sampled_from(["T", " ", "x"]),
        st.sampled_from(["+03:00", "+0300", "Z", "-05:30", "", "+24:00", " +03:00"]),
    )
    | st.builds(
        lambda moment, zone: moment.replace(tzinfo=zone).isoformat(),
        moments,
        st.sampled_from([None, UTC, timezone(timedelta(hours=3))]),
    )
    | st.integers(min_value=-(10**6), max_value=3 * 10**10)
    | st.integers(min_value=0, max_value=3 * 10**10).map(str)
    | st.sampled_from(["2024-02-30T00:00:00+03:00", "2024-01-09", "01.09.2024 10:15:07", "yesterday"])
    | st.floats(min_value=0, max_value=1e11, allow_nan=False).map(lambda x: round(x, 3))
    | blanks
    | st.none()
    | st.booleans()
    | st.text(max_size=4)
    | st.lists(st.integers(), max_size=1)
)
event_names = (
    st.sampled_from(
        ["ONCRMDEALUPDATE", "ONCRMDEALADD", "onCrmDealUpdate", " ONCRMDEALADD\n", "ONCRMLEADADD", "ON CRM",
         "on-crm", "\u00df", "\ufb00", "\u0131", "A" * 128, "a" * 129, "ONCRMDEALUPDATE\n\n", "_"]
    )
    | around(128)
    | st.text(alphabet="ONCRMDEALUPDT_ adx9\n", max_size=6)
)  # fmt: skip

FORM = parse_form(fixture_bytes("bitrix24", "ONCRMDEALUPDATE.form"))
DEAL = fixture_json("bitrix24", "crm.deal.get.json")["result"]
CONTACT = fixture_json("bitrix24", "crm.contact.get.json")["result"]
RECORDS = fixture_json("bitrix24", "crm.stagehistory.list.json")["result"]["items"]

# A form as `parse_form` gives it: strings, nested by the brackets; some parts absent or reshaped.
auths = st.fixed_dictionaries(
    {},
    optional={
        "domain": around(253) | st.just("example-shop.bitrix24.by"),
        "client_endpoint": st.just("https://example-shop.bitrix24.by/rest/"),
        "member_id": around(128) | st.just("0f1e2d3c4b5a69788796a5b4c3d2e1f0"),
        "application_token": around(256) | st.just(" tok ") | st.text(max_size=6),
    },
)
forms = st.fixed_dictionaries(
    {},
    optional={
        "event": event_names,
        "event_handler_id": around(64) | st.just("201"),
        "data": st.fixed_dictionaries(
            {}, optional={"FIELDS": st.fixed_dictionaries({}, optional={"ID": numbers})}
        )
        | json_leaf,
        "ts": numbers,
        "auth": auths | json_leaf | st.lists(st.text(max_size=2), max_size=1),
    },
)


def _changed(document: Any, path: tuple[str, ...], value: Any) -> Any:
    """A deep copy of `document` with the value at `path` replaced (or removed: `value` ABSENT)."""
    copy = deepcopy(document)
    *parents, leaf = path
    target = copy
    for parent in parents:
        target = target[parent]
    if value is ABSENT:
        target.pop(leaf, None)
    else:
        target[leaf] = value
    return copy


ABSENT = object()


def _one_change(document: Any, choices: list[tuple[tuple[str, ...], st.SearchStrategy[Any]]]) -> Any:
    """The document with one field replaced or removed: every bound and form of each, the others valid."""
    return st.one_of(
        *(
            st.builds(_changed, st.just(document), st.just(path), values | st.just(ABSENT))
            for path, values in choices
        )
    )


form_changes = _one_change(
    FORM,
    [
        (("event",), event_names),
        (("data", "FIELDS", "ID"), numbers),
        (("data", "FIELDS"), json_leaf),
        (("data",), json_leaf),
        (("ts",), numbers),
        (("auth", "domain"), around(253)),
        (("auth", "member_id"), around(128)),
        (("auth", "application_token"), around(256)),
        (("auth",), json_leaf),
        (("event_handler_id",), around(64)),
    ],
)

_DEAL_FIELDS: list[tuple[tuple[str, ...], st.SearchStrategy[Any]]] = [
    (("ID",), numbers),
    (("TITLE",), around(8)),
    (("STAGE_ID",), around(1) | st.sampled_from(["C2:PREPARATION", "NEW", "WON"])),
    (("CATEGORY_ID",), numbers | st.sampled_from(["2", "C2", 0, 4])),
    (("CONTACT_ID",), numbers | st.sampled_from(["0", 0, "1234", " 0 "])),
    (("MOVED_TIME",), times),
    (("DATE_MODIFY",), times),
    (("OPPORTUNITY",), numbers | st.sampled_from(["129.00", 99.5, 0, -0.0])),
    (("CURRENCY_ID",), around(3) | st.just("BYN")),
]
# A result a portal might give: any of the fields, under Bitrix24's names or the models' own
# (populate_by_name: "id" is read where "ID" is absent), and the fields a portal adds.
_ENTITY_NAMES = {
    "ID": "id",
    "TITLE": "title",
    "STAGE_ID": "stage_id",
    "CATEGORY_ID": "category_id",
    "CONTACT_ID": "contact_id",
    "MOVED_TIME": "moved_time",
    "DATE_MODIFY": "date_modify",
    "OPPORTUNITY": "opportunity",
    "CURRENCY_ID": "currency_id",
    "NAME": "name",
    "LAST_NAME": "last_name",
    "TYPE_ID": "type_id",
    "OWNER_ID": "owner_id",
    "CREATED_TIME": "created_time",
}
portal_extras = st.dictionaries(
    st.sampled_from(
        ["UF_CRM_1704700000000", "UF_CRM_PICKUP", "PARENT_ID_1032", "COMMENTS", "TYPE_ID", "EMAIL"]
    ),
    json_value,
    max_size=3,
)


def _results(fields: list[tuple[tuple[str, ...], st.SearchStrategy[Any]]]) -> st.SearchStrategy[Any]:
    by_alias = {path[0]: values for path, values in fields}
    by_name = {_ENTITY_NAMES[alias]: values for alias, values in by_alias.items() if alias in _ENTITY_NAMES}
    return st.builds(
        lambda extras, aliased, named: {**extras, **aliased, **named},
        portal_extras,
        st.fixed_dictionaries({}, optional=by_alias),
        st.fixed_dictionaries({}, optional=by_name) | st.just({}),
    )


def _nearly(document: dict[str, Any], fields: list[tuple[tuple[str, ...], st.SearchStrategy[Any]]]) -> Any:
    """The fixture with a few fields replaced (or given under the model's own name too)."""
    return st.builds(lambda changes: {**document, **changes}, _results(fields))


deals = _results(_DEAL_FIELDS) | _nearly(DEAL, _DEAL_FIELDS) | _one_change(DEAL, _DEAL_FIELDS) | json_leaf

phone_values = (
    st.sampled_from(["+375 29 123-45-67", " +375 17 222-33-44 ", "8 029 123-45-67", "", " ", "\u00a0"])
    | json_leaf
)
phone_entries = (
    st.fixed_dictionaries(
        {},
        optional={
            "ID": st.sampled_from(["12", 13]),
            "VALUE_TYPE": st.sampled_from(["MOBILE", "WORK", "HOME", "mobile", "Work", "OTHER", ""])
            | json_leaf,
            "VALUE": phone_values,
            "TYPE_ID": st.just("PHONE"),
        },
    )
    | json_leaf
)
multifield = st.lists(phone_entries, max_size=4) | json_value
_CONTACT_FIELDS: list[tuple[tuple[str, ...], st.SearchStrategy[Any]]] = [
    (("ID",), numbers),
    (("NAME",), around(4) | st.just(" Anna ")),
    (("LAST_NAME",), around(4)),
    (("PHONE",), multifield),
    (("EMAIL",), multifield),
    # The models' own fields, which a result could name (none does): read only without PHONE.
    (("phones",), st.lists(phone_values, max_size=2) | json_value),
    (("phone_types",), st.lists(st.sampled_from(["MOBILE", "WORK", 1]), max_size=2) | json_value),
]
contacts = (
    _results(_CONTACT_FIELDS)
    | _nearly(CONTACT, _CONTACT_FIELDS)
    | _one_change(CONTACT, _CONTACT_FIELDS)
    | json_leaf
)

_RECORD_FIELDS: list[tuple[tuple[str, ...], st.SearchStrategy[Any]]] = [
    (("ID",), numbers),
    (("TYPE_ID",), numbers | st.sampled_from(["1", "2", "3", 2])),
    (("OWNER_ID",), numbers),
    (("CREATED_TIME",), times),
    (("CATEGORY_ID",), numbers | st.sampled_from(["0", 0, "C2"])),
    (("STAGE_ID",), around(1) | st.sampled_from(["NEW", "C2:EXECUTING"])),
    (("STAGE_SEMANTIC_ID",), json_leaf),
]
records = (
    _results(_RECORD_FIELDS)
    | st.sampled_from(RECORDS).flatmap(lambda record: _nearly(record, _RECORD_FIELDS))
    | st.sampled_from(RECORDS).flatmap(lambda record: _one_change(record, _RECORD_FIELDS))
    | json_leaf
)


# -- the comparisons -----------------------------------------------------------------------------
@given(form=forms | form_changes)
@settings(max_examples=1500)
@example(form=_changed(FORM, ("data", "FIELDS", "ID"), "1" * 4301))
@example(form=_changed(FORM, ("ts",), " " * 3))
@example(form=_changed(FORM, ("auth", "application_token"), " " + "t" * 256 + " "))
def test_an_outgoing_event_is_read_as_the_pydantic_model_read_it(form: Any) -> None:
    expected, expected_locs = outcome(lambda: OracleOutgoingEvent.from_form(form))
    got, locs = outcome(lambda: OutgoingEvent.from_form(form))
    assert (got is None, locs) == (expected is None, expected_locs)
    if expected is not None:
        _same_event(got, expected)


@given(result=deals)
@settings(max_examples=1500)
@example(result={"id": "7", "stage_id": "NEW", "ID": "x"})
@example(result={**DEAL, "CONTACT_ID": False})
def test_a_deal_is_read_as_the_pydantic_model_read_it(result: Any) -> None:
    expected, expected_locs = outcome(lambda: OracleDeal.from_result(result))
    got, locs = outcome(lambda: Deal.from_result(result))
    assert (got is None, locs) == (expected is None, expected_locs)
    if expected is not None:
        _same_deal(got, expected)


@given(result=contacts)
@settings(max_examples=1500)
@example(result={"ID": "1", "PHONE": "x", "phones": [1]})
@example(result={"ID": "1", "phones": ["+375 29 123-45-67", 2], "phone_types": "MOBILE"})
def test_a_contact_is_read_as_the_pydantic_model_read_it(result: Any) -> None:
    expected, expected_locs = outcome(lambda: OracleContact.from_result(result))
    got, locs = outcome(lambda: Contact.from_result(result))
    assert (got is None, locs) == (expected is None, expected_locs)
    if expected is not None:
        _same_contact(got, expected)


@given(item=records)
@settings(max_examples=1500)
@example(item={**RECORDS[0], "CREATED_TIME": ""})
def test_a_stage_history_record_is_read_as_the_pydantic_model_read_it(item: Any) -> None:
    expected, expected_locs = outcome(lambda: OracleStageHistoryRecord.model_validate(item))
    got, locs = outcome(lambda: StageHistoryRecord.from_result(item))
    assert (got is None, locs) == (expected is None, expected_locs)
    if expected is not None:
        _same_record(got, expected)
