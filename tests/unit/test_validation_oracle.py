"""The cold path's hand-checked documents against the pydantic models they replaced (a test-only oracle).

`pipeline.validation` took pydantic off every function's first invocation (docs/perf.md). The
envelope, the Telegram update and the worker's settings must accept and refuse what those models
did, name the same fields, and write the same JSON (a queue holds bodies both wrote). The models
below are release 0.5.0's, verbatim but for their names; Hypothesis searches JSON-shaped inputs
for a difference.

One difference is deliberate: pydantic read a number (or a string of digits) as a Unix time for
`received_at`; `Envelope` reads only a datetime or its ISO 8601 text, all any writer of ours ever
wrote (`to_json`), so the generator gives `received_at` those and text that is neither.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone
from typing import Any, Literal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictInt,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from pipeline.envelope import SOURCES, Envelope
from pipeline.formats import SCHEMA_VERSION, by_name
from pipeline.retention import IDEMPOTENCY_TTL_SECONDS, check_idempotency_ttl
from pipeline.telegram import UPDATE_KINDS, TelegramUpdate, update_type
from pipeline.validation import Invalid
from pipeline.worker import ENVIRONMENT_VARIABLES, WorkerSettings

FORMAT = by_name("envelope")
_STORED = {"stored": True}
KindObject = dict[str, Any] | None


class OracleEnvelope(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    event_id: str = Field(min_length=1)
    source: Literal["telegram", "crm", "bitrix24", "amocrm", "broadcast"]
    type: str = Field(min_length=1)
    correlation_id: str = Field(min_length=1)
    received_at: datetime
    payload: dict[str, Any]
    schema_version: int = FORMAT.version

    @model_validator(mode="before")
    @classmethod
    def _known_version(cls, data: Any, info: ValidationInfo) -> Any:
        if isinstance(data, dict):
            if info.context == _STORED and SCHEMA_VERSION not in data:
                data = {**data, SCHEMA_VERSION: 0}
            FORMAT.version_of(data)
        return data


class OracleUpdate(BaseModel):
    model_config = ConfigDict(extra="allow", frozen=True)

    update_id: StrictInt
    # Every known kind, as release 0.5.0 listed them (checked against UPDATE_KINDS below).
    message: KindObject = None
    edited_message: KindObject = None
    channel_post: KindObject = None
    edited_channel_post: KindObject = None
    business_connection: KindObject = None
    business_message: KindObject = None
    edited_business_message: KindObject = None
    deleted_business_messages: KindObject = None
    guest_message: KindObject = None
    message_reaction: KindObject = None
    message_reaction_count: KindObject = None
    inline_query: KindObject = None
    chosen_inline_result: KindObject = None
    callback_query: KindObject = None
    shipping_query: KindObject = None
    pre_checkout_query: KindObject = None
    purchased_paid_media: KindObject = None
    poll: KindObject = None
    poll_answer: KindObject = None
    my_chat_member: KindObject = None
    chat_member: KindObject = None
    chat_join_request: KindObject = None
    chat_boost: KindObject = None
    removed_chat_boost: KindObject = None
    managed_bot: KindObject = None
    subscription: KindObject = None
    stopped_message_generation: KindObject = None


class OracleSettings(BaseModel):
    consumer_name: str = Field(min_length=1)
    queue_url: str = Field(min_length=1)
    dlq_url: str = Field(min_length=1)
    journal_table: str = Field(min_length=1)
    idempotency_ttl_seconds: int = IDEMPOTENCY_TTL_SECONDS
    alarm_topic_arn: str | None = None

    _long_enough = field_validator("idempotency_ttl_seconds")(check_idempotency_ttl)


def outcome(parse: Any) -> tuple[Any, set[tuple[Any, ...]]]:
    """(what `parse()` returned, None if refused; the refused locations)."""
    try:
        return parse(), set()
    except (ValidationError, Invalid) as error:
        return None, {tuple(item["loc"]) for item in error.errors(include_input=False)}


json_leaf = (
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text()
)
json_value = st.recursive(
    json_leaf,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
    max_leaves=8,
)
zones = st.sampled_from([UTC, timezone(timedelta(hours=3)), timezone(timedelta(hours=-5, minutes=-30)), None])
moments = st.builds(
    lambda moment, zone: moment.replace(tzinfo=zone),
    st.datetimes(min_value=datetime(1970, 1, 2), max_value=datetime(2200, 1, 1)),
    zones,
)
received = (
    moments
    | moments.map(lambda moment: moment.isoformat())
    | moments.map(lambda moment: moment.isoformat().replace("+00:00", "Z"))
    | st.text(alphabet="abcxyz:-", max_size=8)
    | st.none()
    | st.lists(st.integers(), max_size=1)
)
texts = st.text(max_size=4) | json_value
valid_envelope = st.fixed_dictionaries(
    {
        "event_id": st.text(min_size=1, max_size=8),
        "source": st.sampled_from(SOURCES),
        "type": st.text(min_size=1, max_size=8),
        "correlation_id": st.text(min_size=1, max_size=8),
        "received_at": moments,
        "payload": st.dictionaries(st.text(max_size=4), json_value, max_size=4),
    },
    optional={SCHEMA_VERSION: st.sampled_from([0, FORMAT.version])},
)
any_envelope = st.fixed_dictionaries(
    {},
    optional={
        "event_id": texts,
        "source": st.sampled_from(SOURCES) | texts,
        "type": texts,
        "correlation_id": texts,
        "received_at": received,
        "payload": json_value,
        SCHEMA_VERSION: st.sampled_from(
            [0, FORMAT.version, FORMAT.version + 1, "1", 1.0, 1.5, True, "x", None]
        ),
        "extra": json_value,
    },
)


def test_the_oracle_lists_every_kind_this_code_knows() -> None:
    assert [name for name in OracleUpdate.model_fields if name != "update_id"] == list(UPDATE_KINDS)


@given(data=valid_envelope | any_envelope, stored=st.booleans())
@settings(max_examples=400)
def test_an_envelope_is_accepted_and_refused_as_the_pydantic_model_did(
    data: dict[str, Any], stored: bool
) -> None:
    context = _STORED if stored else None
    expected, expected_locs = outcome(lambda: OracleEnvelope.model_validate(data, context=context))
    got, locs = outcome(lambda: Envelope.parse(data, stored=stored))
    assert (got is None, locs) == (expected is None, expected_locs)
    if expected is not None:
        assert got.to_json() == expected.model_dump_json()
        assert got.to_document() == expected.model_dump(mode="json")
        assert Envelope.from_json(got.to_json()) == got


@given(data=valid_envelope)
def test_a_body_either_wrote_reads_back_the_same_in_the_other(data: dict[str, Any]) -> None:
    ours = Envelope.parse(data)
    theirs = OracleEnvelope.model_validate(data)
    assert Envelope.from_json(theirs.model_dump_json()).to_json() == ours.to_json()
    assert OracleEnvelope.model_validate_json(ours.to_json(), context=_STORED) == theirs


kind_values = st.none() | st.dictionaries(st.text(max_size=3), json_leaf, max_size=2) | json_leaf
updates = st.fixed_dictionaries(
    {},
    optional={
        "update_id": st.integers() | json_leaf,
        **{kind: kind_values for kind in ("message", "callback_query", "poll", "inline_query")},
        "future_kind": kind_values,
        "Not-a-kind": json_leaf,
    },
)


@given(data=updates)
@settings(max_examples=300)
def test_an_update_is_accepted_and_refused_as_the_pydantic_model_did(data: dict[str, Any]) -> None:
    expected, expected_locs = outcome(lambda: OracleUpdate.model_validate(data))
    got, locs = outcome(lambda: TelegramUpdate.parse(data))
    assert (got is None, locs) == (expected is None, expected_locs)
    if expected is not None:
        assert got.update_id == expected.update_id
        for kind in UPDATE_KINDS:
            assert got.kind_object(kind) == getattr(expected, kind)
        assert got.other_keys() == list(expected.model_extra or {})
        assert update_type(got) in (*UPDATE_KINDS, *(expected.model_extra or {}), "unknown")


environment_values = st.sampled_from(
    ["", "x", "0", "-1", " 2 ", "1.5", str(IDEMPOTENCY_TTL_SECONDS)]
) | st.text(max_size=4)
environments = st.dictionaries(st.sampled_from(sorted(ENVIRONMENT_VARIABLES.values())), environment_values)


@given(environment=environments)
@settings(max_examples=300)
def test_worker_settings_accept_and_refuse_an_environment_as_the_pydantic_model_did(
    environment: dict[str, str],
) -> None:
    def oracle() -> OracleSettings:
        required = {"consumer_name", "queue_url", "dlq_url", "journal_table"}
        values = {
            field: environment.get(name, "")
            for field, name in ENVIRONMENT_VARIABLES.items()
            if field in required or environment.get(name)
        }
        return OracleSettings.model_validate(values)

    expected, expected_locs = outcome(oracle)
    got, locs = outcome(lambda: WorkerSettings.from_environment(environment))
    assert (got is None, locs) == (expected is None, expected_locs)
    if expected is not None:
        assert vars(got) == expected.model_dump()


@pytest.mark.parametrize(
    ("body", "loc"),
    [("not json", ()), (json.dumps({SCHEMA_VERSION: FORMAT.version + 1}), ()), ("[]", ())],
    ids=["not-json", "newer-version", "not-an-object"],
)
def test_a_body_no_envelope_can_be_read_from_is_refused_as_a_whole(body: str, loc: tuple[Any, ...]) -> None:
    with pytest.raises(Invalid) as refused:
        Envelope.from_json(body)
    assert [error["loc"] for error in refused.value.errors()] == [loc]
