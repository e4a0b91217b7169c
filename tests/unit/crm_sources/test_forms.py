"""PHP-style bracket forms (Bitrix24 and amoCRM webhooks): read field by field, or into nested dicts."""

from __future__ import annotations

from urllib.parse import quote

import pytest

from pipeline.crm.forms import (
    MAX_BODY_BYTES,
    MAX_DEPTH,
    MAX_FIELDS,
    FormError,
    FormTooLarge,
    form_fields,
    is_form,
    parse_form,
)


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
    ids=lambda case: case if isinstance(case, str) else "body",  # bodies hold SECRET: never in an id
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


# -- form_fields: one field at a time, values decoded on demand -----------------------------------
def test_form_fields_yields_each_field_in_order_with_its_name_split_into_segments() -> None:
    fields = list(form_fields(b"leads%5Bstatus%5D%5B0%5D%5Bid%5D=21804135&&a[]=x+y&flag"))

    assert [(f.position, f.path) for f in fields] == [
        (1, ("leads", "status", "0", "id")),
        (2, ("a", "")),
        (3, ("flag",)),
    ]
    assert [f.value() for f in fields] == ["21804135", "x y", ""]


def test_form_fields_has_no_field_limit_and_no_depth_limit() -> None:
    """It builds nothing, so a batch of any number of fields, nested as deep as amoCRM's custom
    field values, costs only its reading."""
    raw = "&".join(f"f{i}[a][b][c][d][e][f][g][h][i]=1" for i in range(MAX_FIELDS * 30)).encode()

    assert sum(1 for _ in form_fields(raw)) == MAX_FIELDS * 30


def test_a_value_is_refused_only_when_it_is_read() -> None:
    [_skipped, read] = form_fields(b"skipped=%FF&read=%FF")

    with pytest.raises(FormError, match=r"^form field 2 is not UTF-8 once %-decoded$"):
        read.value()


def test_a_body_over_the_api_gateway_bound_is_too_large_for_every_reader() -> None:
    raw = b"a=" + b"x" * (MAX_BODY_BYTES - 1)

    for reader in (parse_form, lambda body: list(form_fields(body))):
        with pytest.raises(FormTooLarge, match=f"exceeds the {MAX_BODY_BYTES}-byte limit"):
            reader(raw)
    assert MAX_BODY_BYTES == 10 * 1024 * 1024  # API Gateway's HTTP API payload quota


@pytest.mark.parametrize(
    ("content_type", "expected"),
    [
        ("application/x-www-form-urlencoded", True),
        ("Application/X-WWW-Form-Urlencoded; charset=UTF-8", True),
        ("application/json", False),
        ("multipart/form-data; boundary=x", False),
        ("", False),
        (None, False),
    ],
)
def test_is_form_reads_the_media_type_of_a_content_type(content_type: str | None, expected: bool) -> None:
    assert is_form(content_type) is expected
