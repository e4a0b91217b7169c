"""PHP-style bracket forms (Bitrix24 and amoCRM webhooks) into nested dicts."""

from __future__ import annotations

from urllib.parse import quote

import pytest

from pipeline.forms import MAX_DEPTH, MAX_FIELDS, FormError, parse_form


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (b"data[FIELDS][ID]=759", {"data": {"FIELDS": {"ID": "759"}}}),
        (b"data%5BFIELDS%5D%5BID%5D=759", {"data": {"FIELDS": {"ID": "759"}}}),
        (b"leads[status][0][id]=1", {"leads": {"status": {"0": {"id": "1"}}}}),
        (b"a[]=x&a[]=y", {"a": ["x", "y"]}),
        (b"a[b][]=x&a[b][]=y&a[c]=z", {"a": {"b": ["x", "y"], "c": "z"}}),
        (b"event=ONCRMDEALUPDATE&ts=1736405807", {"event": "ONCRMDEALUPDATE", "ts": "1736405807"}),
        # Blank values are kept; '+' and %-escapes decode; a field without '=' is blank.
        (b"a=&b=two+words&c=%2B375&flag", {"a": "", "b": "two words", "c": "+375", "flag": ""}),
        (b"", {}),
        ("name=Анна".encode(), {"name": "Анна"}),
        (f"name={quote('Анна')}".encode(), {"name": "Анна"}),
    ],
)
def test_bracket_keys_become_nested_dicts_of_strings(raw: bytes, expected: dict[str, object]) -> None:
    assert parse_form(raw) == expected


def test_numeric_indices_stay_string_keys_in_arrival_order() -> None:
    form = parse_form(b"x[10][id]=a&x[2][id]=b")
    assert list(form["x"]) == ["10", "2"]
    assert form["x"]["2"] == {"id": "b"}


def test_nesting_up_to_the_limit_is_accepted() -> None:
    raw = ("a" + "[k]" * MAX_DEPTH + "=v").encode()
    node = parse_form(raw)["a"]
    for _ in range(MAX_DEPTH - 1):
        node = node["k"]
    assert node == {"k": "v"}


def test_exactly_the_field_limit_is_accepted() -> None:
    raw = "&".join(f"f{i}=1" for i in range(MAX_FIELDS)).encode()
    assert len(parse_form(raw)) == MAX_FIELDS


SECRET = "s3cr3t-token-+375291234567"


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (b"token=\xff\xfe", "not UTF-8"),
        (b"token=%FF%FE", "not UTF-8 once %-decoded"),
        (f"a={SECRET}&a[b]={SECRET}".encode(), "nests under a name that is also a scalar"),
        (f"a[b]={SECRET}&a={SECRET}".encode(), "gives a scalar to a name that is also nested"),
        (f"a[]={SECRET}&a={SECRET}".encode(), "gives a scalar to a name that is also nested or a list"),
        (f"a={SECRET}&a[]={SECRET}".encode(), "appends to a name that is not a list"),
        (f"a[]={SECRET}&a[0]={SECRET}".encode(), "nests under a name that is also a scalar or a list"),
        (f"a={SECRET}&a={SECRET}".encode(), "repeats a name given before"),
        (("a" + "[k]" * (MAX_DEPTH + 1) + f"={SECRET}").encode(), f"deeper than {MAX_DEPTH} brackets"),
        ("&".join(f"f{i}=1" for i in range(MAX_FIELDS + 1)).encode(), f"more than {MAX_FIELDS} fields"),
        (f"a[b={SECRET}".encode(), "malformed name"),
        (f"a]b={SECRET}".encode(), "malformed name"),
        (f"a[b]c={SECRET}".encode(), "malformed name"),
        (f"a[b[c]]={SECRET}".encode(), "malformed name"),
        (f"[b]={SECRET}".encode(), "malformed name"),
        (f"={SECRET}".encode(), "malformed name"),
        (f"a[][b]={SECRET}".encode(), "empty brackets before its last bracket"),
    ],
)
def test_refusals_say_what_is_wrong_without_quoting_values(raw: bytes, message: str) -> None:
    with pytest.raises(FormError) as caught:
        parse_form(raw)
    assert message in str(caught.value)
    assert SECRET not in str(caught.value) and "3cr3t" not in str(caught.value)
    assert caught.value.__cause__ is None


def test_the_error_names_the_position_of_the_bad_field() -> None:
    with pytest.raises(FormError, match=r"^form field 3 has a malformed name"):
        parse_form(b"a=1&b=2&c[=3")


def test_form_error_is_a_value_error() -> None:
    assert issubclass(FormError, ValueError)
