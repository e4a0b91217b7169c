"""GSM-7 / UCS-2 and part counting: what a text costs, as End User Messaging and carriers count it."""

from __future__ import annotations

import itertools

from hypothesis import example, given
from hypothesis import strategies as st

from pipeline.sms.encoding import GSM7_BASIC, GSM7_EXTENSION, LIMITS, size, split

GSM_TEXT = st.text(alphabet=sorted(GSM7_BASIC | GSM7_EXTENSION), max_size=700)
ANY_TEXT = st.text(
    alphabet=st.one_of(st.sampled_from(sorted(GSM7_BASIC | GSM7_EXTENSION)), st.characters(codec="utf-8")),
    max_size=400,
)


def units(text: str, encoding: str) -> int:
    if encoding == "GSM-7":
        return sum(2 if c in GSM7_EXTENSION else 1 for c in text)
    return len(text.encode("utf-16-le")) // 2


def test_the_limits_are_160_153_and_70_67() -> None:
    assert size("a" * 160) == size("a" * 160).__class__("GSM-7", 160, 1, 160)
    assert size("a" * 161).parts == 2
    assert size("a" * 306).parts == 2 and size("a" * 307).parts == 3
    assert (size("ж" * 70).encoding, size("ж" * 70).parts) == ("UCS-2", 1)
    assert size("ж" * 71).parts == 2 and size("ж" * 134).parts == 2 and size("ж" * 135).parts == 3


def test_an_extension_character_counts_two_and_one_outside_gsm_makes_it_all_ucs2() -> None:
    assert size("€" * 80) == size("€" * 80).__class__("GSM-7", 160, 1, 80)
    assert size("€" * 81).parts == 2
    # One Cyrillic letter: the whole 100-character text is UCS-2, two parts instead of one.
    assert (size("a" * 99 + "ж").encoding, size("a" * 99 + "ж").parts) == ("UCS-2", 2)
    # An emoji is two UTF-16 units.
    assert size("😀" * 35).units == 70 and size("😀" * 35).parts == 1 and size("😀" * 36).parts == 2


def test_a_part_never_ends_inside_an_escape_so_153_septets_may_need_another_part() -> None:
    # 152 plain characters then a two-septet one fill 154 > 153: the escape starts the next part.
    text = "a" * 152 + "€" + "a" * 10
    assert size(text).units == 164
    assert [len(part) for part in split(text)] == [152, 11]


@given(ANY_TEXT)
@example("a" * 152 + "€" * 2)  # 156 septets: the first escape starts the second part
@example("a" * 152 + "€" * 77)  # 306 units: ceil says 2, but the escapes cannot split: 3 parts
def test_the_part_count_agrees_with_splitting_the_text_into_parts_of_the_limits(text: str) -> None:
    counted = size(text)
    parts = split(text)
    single, per_part = LIMITS[counted.encoding]
    assert "".join(parts) == text
    assert counted.parts == len(parts)
    assert counted.units == units(text, counted.encoding)
    if counted.units <= single:
        assert parts == [text]
    else:
        assert all(units(part, counted.encoding) <= per_part for part in parts)
        # No part could have taken the next part's first character.
        for part, following in itertools.pairwise(parts):
            assert units(part + following[0], counted.encoding) > per_part
    # Without two-unit characters the count is the plain arithmetic.
    if counted.units == len(text) and counted.units > single:
        assert counted.parts == -(-counted.units // per_part)


@given(GSM_TEXT)
def test_a_text_of_gsm_characters_only_is_gsm7(text: str) -> None:
    assert size(text).encoding == "GSM-7"
