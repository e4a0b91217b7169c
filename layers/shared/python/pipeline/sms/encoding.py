"""How many billed parts an SMS text is, counted as End User Messaging and the carriers count them.

A text of only GSM 03.38 characters goes as GSM-7: 160 septets in a single message, 153 a part
once split (the rest is the concatenation header); a character of the extension table (`€`, `[`,
`{`, `|`, `~`, `^`, `\\`, `]`, `}`, form feed) is an escape plus the character, two septets, and a
part never ends between the two. Any other character makes the whole text UCS-2: 70 UTF-16 code
units single, 67 a part (a character outside the BMP, an emoji, is two units, never split).
Each part is billed; `pipeline.sms.rules` checks every template against the part limit with
this, and the journal records what each notification costs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Encoding = Literal["GSM-7", "UCS-2"]

GSM7_BASIC = frozenset(
    "@£$¥èéùìòÇ\nØø\rÅåΔ_ΦΓΛΩΠΨΣΘΞÆæßÉ !\"#¤%&'()*+,-./0123456789:;<=>?¡ABCDEFGHIJKLMNOPQRSTUVWXYZÄÖÑÜ§"
    "¿abcdefghijklmnopqrstuvwxyzäöñüà"
)
# Sent as ESC + the character: two septets each.
GSM7_EXTENSION = frozenset("\f^{}\\[~]|€")

# (single message, per part once split), in units of the encoding.
LIMITS: dict[Encoding, tuple[int, int]] = {"GSM-7": (160, 153), "UCS-2": (70, 67)}


@dataclass(frozen=True)
class SmsSize:
    encoding: Encoding
    units: int  # septets (GSM-7) or UTF-16 code units (UCS-2)
    parts: int
    characters: int


def encoding_of(text: str) -> Encoding:
    return "GSM-7" if all(c in GSM7_BASIC or c in GSM7_EXTENSION for c in text) else "UCS-2"


def unit_widths(text: str, encoding: Encoding) -> list[int]:
    """Each character's width in units of `encoding` (an indivisible run of a part)."""
    if encoding == "GSM-7":
        return [2 if c in GSM7_EXTENSION else 1 for c in text]
    return [2 if ord(c) > 0xFFFF else 1 for c in text]


def split(text: str) -> list[str]:
    """The text as the parts it is sent in (one part if it fits a single message)."""
    encoding = encoding_of(text)
    single, per_part = LIMITS[encoding]
    widths = unit_widths(text, encoding)
    if sum(widths) <= single:
        return [text]
    parts: list[str] = []
    start, used = 0, 0
    for index, width in enumerate(widths):
        if used + width > per_part:
            parts.append(text[start:index])
            start, used = index, 0
        used += width
    parts.append(text[start:])
    return parts


def size(text: str) -> SmsSize:
    encoding = encoding_of(text)
    return SmsSize(encoding, sum(unit_widths(text, encoding)), len(split(text)), len(text))
