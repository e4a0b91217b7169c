"""The cold path's hand-checked documents against the pydantic models they replaced (a test-only oracle).

`pipeline.validation` took pydantic off every function's first invocation (docs/perf.md). The
envelope, the Telegram update, the worker's settings, the `ai` consumer's reading of a model's
answer and the `crm` consumer's of its secret must accept and refuse what those models
did, name the same fields, and write the same JSON (a queue holds bodies both wrote). The models
below are release 0.5.0's, verbatim but for their names; Hypothesis searches JSON-shaped inputs
for a difference.

One difference is deliberate: pydantic read a number (or a string of digits) as a Unix time
for `received_at`; `Envelope` reads only a datetime or its ISO 8601 text, all any writer of ours
ever wrote (`to_json`), so the generator gives `received_at` those and text that is neither. And
the JSON is the same values, not always the same text: Python writes a float's exponent with two
digits (`1e-08`), pydantic with as many as it needs (`1e-8`).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone
from typing import Annotated, Any, Literal

import pytest
from ai.extraction import INTENTS, Extraction, Intent
from crm.sinks import parse_config
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictInt,
    TypeAdapter,
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


class OracleExtraction(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")

    intent: Intent
    name: str | None = Field(default=None, max_length=200)
    phone: str | None = Field(default=None, max_length=40)
    email: str | None = Field(default=None, max_length=254, pattern=r"[^@\s]+@[^@\s]+\.[^@\s]+")
    product: str | None = Field(default=None, max_length=200)
    urgency: Literal["low", "medium", "high"] | None = None

    @field_validator("intent", "urgency", mode="before")
    @classmethod
    def _lower(cls, value: Any) -> Any:
        return value.strip().lower() if isinstance(value, str) else value

    @field_validator("name", "phone", "email", "product", mode="before")
    @classmethod
    def _blank_is_none(cls, value: Any) -> Any:
        if isinstance(value, str):
            value = value.strip()
            return value or None
        return value


class OracleWebhookConfig(BaseModel):
    model_config = ConfigDict(frozen=True)

    kind: Literal["webhook"]
    url: str = Field(pattern=r"^https?://\S+$")
    auth_header: str | None = Field(default=None, pattern=r"\S")


class OracleBitrix24Config(BaseModel):
    model_config = ConfigDict(frozen=True)

    kind: Literal["bitrix24"]
    url: str = Field(pattern=r"^https?://\S+$")
    source_id: str = Field(default="OTHER", min_length=1)


ORACLE_CRM_CONFIG: TypeAdapter[OracleWebhookConfig | OracleBitrix24Config] = TypeAdapter(
    Annotated[OracleWebhookConfig | OracleBitrix24Config, Field(discriminator="kind")]
)


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
        assert json.loads(got.to_json()) == json.loads(expected.model_dump_json())
        assert got.to_document() == expected.model_dump(mode="json")
        assert Envelope.from_json(got.to_json()) == got


@given(data=valid_envelope)
def test_a_body_either_wrote_reads_back_the_same_in_the_other(data: dict[str, Any]) -> None:
    ours = Envelope.parse(data)
    theirs = OracleEnvelope.model_validate(data)
    assert Envelope.from_json(theirs.model_dump_json()) == ours
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


# Around each length bound (40, 200, 254), texts to strip and blanks.
bounded = st.sampled_from([39, 40, 41, 199, 200, 201, 249, 250]).map(lambda n: "x" * n)
answer_texts = st.sampled_from(["", " ", " X ", "Олег"]) | bounded | st.text(max_size=6)
emails = st.sampled_from(["a@b.co", " X@Y.Z ", "@@", "a@b", "a b@c.d", "no email"]) | bounded.map(
    lambda x: x + "@b.co"
)
answers = st.fixed_dictionaries(
    {"intent": st.sampled_from([*INTENTS, " Purchase ", "SPAM", "buy"]) | json_leaf},
    optional={
        "urgency": st.sampled_from(["low", "HIGH ", "urgent"]) | json_leaf,
        **{key: answer_texts | json_leaf for key in ("name", "phone", "product")},
        "email": emails | answer_texts | json_leaf,
        "other": json_leaf,
    },
)


@given(data=answers)
@settings(max_examples=300)
def test_a_models_answer_is_read_as_the_pydantic_model_did(data: dict[str, Any]) -> None:
    """The `ai` consumer keeps an answer it cannot read as `unparsed` (its raw text), so accepting
    what the model refused, or the reverse, would change what is stored."""
    expected, _ = outcome(lambda: OracleExtraction.model_validate(data))
    got, _ = outcome(lambda: Extraction.parse(data))
    assert (got is None) == (expected is None)
    if expected is not None:
        assert got.present() == expected.model_dump(exclude_none=True)


@pytest.mark.parametrize("key", ["name", "phone", "email", "product"])
@pytest.mark.parametrize("length", [39, 40, 41, 199, 200, 201, 253, 254, 255])
@pytest.mark.parametrize("padding", ["", "  "])
def test_an_answers_texts_are_bounded_as_the_pydantic_model_bounded_them(
    key: str, length: int, padding: str
) -> None:
    text = "x" * (length - 5) + "@b.co" if key == "email" else "x" * length
    data = {"intent": "purchase", key: padding + text + padding}
    expected, _ = outcome(lambda: OracleExtraction.model_validate(data))
    got, _ = outcome(lambda: Extraction.parse(data))
    assert (got is None) == (expected is None)


crm_texts = st.sampled_from(["", " ", "x", "OTHER", "Bearer t", "https://a.b/rest/1/c/"])
crm_urls = st.sampled_from(
    ["https://a.b/rest/1/c/", "http://x", "https://", "https://a b", " https://x", "https://x\n"]
)
crm_configs = st.fixed_dictionaries(
    {"kind": st.sampled_from(["webhook", "bitrix24"]), "url": crm_urls},
    optional={"auth_header": crm_texts, "source_id": crm_texts, "other": json_leaf},
) | st.fixed_dictionaries(
    {},
    optional={
        "kind": st.sampled_from(["webhook", "bitrix24", "amocrm"]) | json_leaf,
        "url": crm_urls | json_leaf,
        "auth_header": crm_texts | json_leaf,
        "source_id": crm_texts | json_leaf,
    },
)


@given(config=crm_configs)
@settings(max_examples=300)
def test_the_crm_secret_is_read_as_the_pydantic_models_read_it(config: dict[str, Any]) -> None:
    expected, expected_locs = outcome(lambda: ORACLE_CRM_CONFIG.validate_python(config))
    got, locs = outcome(lambda: parse_config(config))
    assert (got is None, locs) == (expected is None, expected_locs)
    if expected is not None:
        assert vars(got) == expected.model_dump()


@given(version=json_value, body=valid_envelope)
def test_any_schema_version_in_a_body_is_read_or_refused_as_the_bodys_fault(
    version: Any, body: dict[str, Any]
) -> None:
    """A queue or DLQ body is whatever was sent to the queue: whatever its `schema_version`, the
    envelope is read (a version this code reads) or refused as `Invalid` (the worker dead-letters
    it with the reason), never another exception, which would be retried without one."""
    text = Envelope(**body).to_json()
    try:
        envelope = Envelope.from_json(json.dumps({**json.loads(text), SCHEMA_VERSION: version}))
    except Invalid:
        return
    assert envelope.schema_version in FORMAT.readable


@pytest.mark.parametrize(
    ("body", "loc"),
    [
        ("not json", ()),
        (json.dumps({SCHEMA_VERSION: FORMAT.version + 1}), ()),
        ("[]", ()),
        (json.dumps({SCHEMA_VERSION: []}), ()),
    ],
    ids=["not-json", "newer-version", "not-an-object", "version-not-a-number"],
)
def test_a_body_no_envelope_can_be_read_from_is_refused_as_a_whole(body: str, loc: tuple[Any, ...]) -> None:
    with pytest.raises(Invalid) as refused:
        Envelope.from_json(body)
    assert [error["loc"] for error in refused.value.errors()] == [loc]
