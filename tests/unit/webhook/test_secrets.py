"""`pipeline.secrets`: current and previous values, the rotation window, caching, bounded refresh.

The consumers' plain reader (`secret_string`) is exercised through the consumers' tests; here
only what it shares with the rotation-aware one.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from pipeline import aws, secrets
from pipeline.registry import secret_env_var
from tests.unit.webhook.support import TELEGRAM_TOKEN, Pipeline

NEW = "rotated-value-0123456789"


def _clock(monkeypatch: pytest.MonkeyPatch, seconds_from_now: float) -> None:
    moved = datetime.now(UTC) + timedelta(seconds=seconds_from_now)
    monkeypatch.setattr(secrets, "_now", lambda: moved)


def test_never_rotated_secret_has_only_its_current_value(pipeline: Pipeline) -> None:
    secret = secrets.get_rotating_secret(pipeline.telegram_secret_id)

    assert (secret.current, secret.previous) == (TELEGRAM_TOKEN, None)
    assert secrets.secret_candidates(pipeline.telegram_secret_id) == (TELEGRAM_TOKEN,)


def test_previous_value_only_inside_the_rotation_window(
    pipeline: Pipeline, monkeypatch: pytest.MonkeyPatch
) -> None:
    pipeline.rotate(pipeline.telegram_secret_id, NEW)

    assert secrets.secret_candidates(pipeline.telegram_secret_id) == (NEW, TELEGRAM_TOKEN)
    _clock(monkeypatch, 3599)
    assert secrets.secret_candidates(pipeline.telegram_secret_id) == (NEW, TELEGRAM_TOKEN)
    _clock(monkeypatch, 3601)
    assert secrets.secret_candidates(pipeline.telegram_secret_id) == (NEW,)


def test_window_length_comes_from_the_environment(
    pipeline: Pipeline, monkeypatch: pytest.MonkeyPatch
) -> None:
    pipeline.rotate(pipeline.telegram_secret_id, NEW)
    monkeypatch.setenv("SECRET_ROTATION_GRACE_SECONDS", "60")

    _clock(monkeypatch, 30)
    assert secrets.secret_candidates(pipeline.telegram_secret_id) == (NEW, TELEGRAM_TOKEN)
    _clock(monkeypatch, 61)
    assert secrets.secret_candidates(pipeline.telegram_secret_id) == (NEW,)


def test_window_is_measured_from_the_current_versions_creation(pipeline: Pipeline) -> None:
    pipeline.rotate(pipeline.telegram_secret_id, NEW)
    created = aws.client("secretsmanager").get_secret_value(SecretId=pipeline.telegram_secret_id)[
        "CreatedDate"
    ]

    secret = secrets.get_rotating_secret(pipeline.telegram_secret_id)

    assert secret.current_created_at == created
    assert secret.candidates(10, created + timedelta(seconds=9)) == (NEW, TELEGRAM_TOKEN)
    assert secret.candidates(10, created + timedelta(seconds=10)) == (NEW,)


def test_previous_is_not_read_once_the_window_has_closed(
    pipeline: Pipeline, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A deployed secret is mostly older than the grace period: a cold start reads it with one
    call, not two, and a sender still using the previous value is refused as before."""
    pipeline.rotate(pipeline.telegram_secret_id, NEW)
    _clock(monkeypatch, 3601)

    assert secrets.secret_candidates(pipeline.telegram_secret_id) == (NEW,)
    assert pipeline.calls["GetSecretValue"] == 1
    assert not secrets.check_with_refresh(
        pipeline.telegram_secret_id, lambda candidates: TELEGRAM_TOKEN in candidates, lambda ok: not ok
    )


# The versions' CreatedDate come from moto's clock, in whole seconds: ages this near the grace
# period could fall on either side of it.
_EDGE_SECONDS = 3


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    grace=st.integers(min_value=10, max_value=7200),
    rotations=st.integers(min_value=0, max_value=2),
    read_age=st.integers(min_value=0, max_value=14400),
    later=st.integers(min_value=0, max_value=14400),
)
def test_candidates_are_those_of_a_read_of_both_stages(
    pipeline: Pipeline,
    monkeypatch: pytest.MonkeyPatch,
    grace: int,
    rotations: int,
    read_age: int,
    later: int,
) -> None:
    """Generated: whatever the grace period, the rotations and when the secret is read and then
    checked, the candidates are those a read of both stages would give (current, plus previous
    while the current version is younger than the grace period), and the read calls Secrets
    Manager once, or twice while the window is open."""
    check_age = read_age + later
    assume(all(abs(age - grace) > _EDGE_SECONDS for age in (read_age, check_age)))
    monkeypatch.setenv("SECRET_ROTATION_GRACE_SECONDS", str(grace))
    values = [f"value-{index}-{uuid.uuid4().hex}" for index in range(rotations + 1)]
    secret_id = aws.client("secretsmanager").create_secret(
        Name=f"generated-{uuid.uuid4().hex}", SecretString=values[0]
    )["ARN"]
    for value in values[1:]:
        pipeline.rotate(secret_id, value)
    secrets.clear_cache()
    reads = pipeline.calls["GetSecretValue"]

    _clock(monkeypatch, read_age)
    at_read = secrets.secret_candidates(secret_id)
    calls = pipeline.calls["GetSecretValue"] - reads
    _clock(monkeypatch, check_age)
    at_check = secrets.secret_candidates(secret_id)  # the cached read

    def expected(age: int) -> tuple[str, ...]:
        return (values[-1], values[-2]) if rotations and age < grace else (values[-1],)

    assert (at_read, at_check) == (expected(read_age), expected(check_age))
    assert calls == (2 if read_age < grace else 1)


def test_cached_value_makes_no_call_until_forced(pipeline: Pipeline) -> None:
    secrets.secret_candidates(pipeline.telegram_secret_id)
    assert pipeline.calls["GetSecretValue"] == 2

    for _ in range(5):
        secrets.secret_candidates(pipeline.telegram_secret_id)
    assert pipeline.calls["GetSecretValue"] == 2

    secrets.secret_candidates(pipeline.telegram_secret_id, force_fetch=True)
    assert pipeline.calls["GetSecretValue"] == 4


def test_the_cache_is_forgotten_with_clear_cache(pipeline: Pipeline) -> None:
    secrets.secret_candidates(pipeline.telegram_secret_id)

    secrets.clear_cache()
    secrets.secret_candidates(pipeline.telegram_secret_id)

    assert pipeline.calls["GetSecretValue"] == 4


def test_a_cached_value_expires_after_max_age_on_the_monotonic_clock(
    pipeline: Pipeline, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The rotation window's clock (`_now`) does not expire the cache: a value read is kept
    `max_age` seconds of the process's own clock, then read again."""
    monotonic = [1000.0]
    monkeypatch.setattr(secrets, "_monotonic", lambda: monotonic[0])
    secrets.get_rotating_secret(pipeline.telegram_secret_id, max_age=300)
    reads = pipeline.calls["GetSecretValue"]

    _clock(monkeypatch, 10_000)
    monotonic[0] += 299
    secrets.get_rotating_secret(pipeline.telegram_secret_id, max_age=300)
    assert pipeline.calls["GetSecretValue"] == reads

    monotonic[0] += 1
    secrets.get_rotating_secret(pipeline.telegram_secret_id, max_age=300)
    assert pipeline.calls["GetSecretValue"] == reads + 1  # past the window: AWSCURRENT alone


def test_refresh_after_a_failed_check_is_rate_limited(
    pipeline: Pipeline, monkeypatch: pytest.MonkeyPatch
) -> None:
    def accepts_new(candidates: tuple[str, ...]) -> bool:
        return NEW in candidates

    def retry_if_rejected(accepted: bool) -> bool:
        return not accepted

    secret_id = pipeline.telegram_secret_id
    assert not secrets.check_with_refresh(secret_id, accepts_new, retry_if_rejected)
    pipeline.rotate(secret_id, NEW)
    reads = pipeline.calls["GetSecretValue"]

    assert not secrets.check_with_refresh(secret_id, accepts_new, retry_if_rejected)
    assert pipeline.calls["GetSecretValue"] == reads

    _clock(monkeypatch, secrets.REFRESH_ON_MISMATCH_INTERVAL_SECONDS)
    assert secrets.check_with_refresh(secret_id, accepts_new, retry_if_rejected)
    assert pipeline.calls["GetSecretValue"] == reads + 2


def test_no_refresh_when_the_result_does_not_ask_for_it(
    pipeline: Pipeline, monkeypatch: pytest.MonkeyPatch
) -> None:
    secrets.secret_candidates(pipeline.telegram_secret_id)
    _clock(monkeypatch, 3600)

    result = secrets.check_with_refresh(pipeline.telegram_secret_id, lambda _: "stale", lambda _: False)

    assert result == "stale"
    assert pipeline.calls["GetSecretValue"] == 2


def test_missing_secret_raises_a_read_error_naming_the_sdks(pipeline: Pipeline) -> None:
    with pytest.raises(secrets.SecretReadError, match="ResourceNotFoundException") as refused:
        secrets.get_rotating_secret("no-such-secret")
    assert aws.error_code(refused.value.__cause__) == "ResourceNotFoundException"  # type: ignore[arg-type]


def test_binary_secret_is_refused(pipeline: Pipeline) -> None:
    arn = aws.client("secretsmanager").create_secret(Name="binary-secret", SecretBinary=b"\x00\x01")["ARN"]

    with pytest.raises(secrets.SecretReadError, match="no SecretString"):
        secrets.get_rotating_secret(arn)


def test_client_is_created_at_first_use(pipeline: Pipeline) -> None:
    secrets.clear_cache()
    aws.reset_clients()
    assert aws.client.cache_info().currsize == 0

    secrets.secret_candidates(pipeline.telegram_secret_id)

    assert aws.client.cache_info().currsize == 1


def test_both_readers_share_the_client_and_each_caches_its_own_reads(
    pipeline: Pipeline, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`pipeline.calls` counts the calls of the process's one Secrets Manager client: both read
    through it, and each read once."""
    monkeypatch.setenv(secret_env_var("telegram_bot_token"), pipeline.telegram_secret_id)

    assert secrets.secret_string("telegram_bot_token") == TELEGRAM_TOKEN
    assert secrets.secret_candidates(pipeline.telegram_secret_id) == (TELEGRAM_TOKEN,)
    reads = pipeline.calls["GetSecretValue"]
    assert reads == 3  # the plain read; AWSCURRENT, and AWSPREVIOUS (created a moment ago: in the window)

    secrets.secret_string("telegram_bot_token")
    secrets.secret_candidates(pipeline.telegram_secret_id)
    assert pipeline.calls["GetSecretValue"] == reads

    secrets.clear_cache()
    secrets.secret_string("telegram_bot_token")
    assert pipeline.calls["GetSecretValue"] == reads + 1
