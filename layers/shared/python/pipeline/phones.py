"""Phone numbers as CRMs write them ("+375 (29) 123-45-67", "8 029 123-45-67") -> E.164.

One customer must have one recipient string, or the SMS journal keys one customer twice; so every
number is normalised by Google's libphonenumber (`phonenumbers`) before anything keys on it.

`phonenumbers` costs a noticeable import on a cold start, so it is imported inside the functions
here, never at module import: the webhook's Telegram path never loads it, and the library loads
each region's metadata only when a number of that region is first parsed. In Lambda it comes
from the phonenumbers layer (infra/constructs/layers.py), attached only where CRM events are
validated.
"""

from __future__ import annotations

import os

# The webhook's environment variable holding the deployment's `phone_default_region`
# ("" or absent: only international +... forms are accepted).
DEFAULT_REGION_ENV = "PHONE_DEFAULT_REGION"


class PhoneNumberError(ValueError):
    """Why a text is not an acceptable phone number; the message never contains the text."""


def prepare() -> None:
    """At the init of a function whose every record parses a phone (the `sms` consumer): import
    libphonenumber then, and the numbering data of the deployment's default region, rather than
    at the first record's share of a vCPU (`pipeline.aws`). Another region's data still loads
    with its first number."""
    import phonenumbers

    region = os.environ.get(DEFAULT_REGION_ENV, "").strip().upper()
    if region in phonenumbers.SUPPORTED_REGIONS:
        phonenumbers.PhoneMetadata.metadata_for_region(region)


def is_known_region(region: str) -> bool:
    """Whether `region` is an ISO 3166 alpha-2 code libphonenumber has numbering data for."""
    import phonenumbers

    return region in phonenumbers.SUPPORTED_REGIONS


def to_e164(text: str, default_region: str | None = None) -> str:
    """`text` as E.164 ("+375291234567"), if libphonenumber finds it a possible and valid number.

    National forms ("8 029 123-45-67") are read in `default_region`; without one only
    international forms ("+375 29 ...") are accepted. Raises PhoneNumberError saying why.
    """
    import phonenumbers

    try:
        number = phonenumbers.parse(text, default_region or None)
    except phonenumbers.NumberParseException as error:
        if error.error_type == phonenumbers.NumberParseException.INVALID_COUNTRY_CODE and not (
            text.strip().startswith("+")
        ):
            if default_region:
                raise PhoneNumberError(f"not a phone number of region {default_region}") from None
            raise PhoneNumberError(
                "not an international (+<country code>) number, and no default region is configured"
            ) from None
        raise PhoneNumberError("not a phone number") from None
    if not phonenumbers.is_possible_number(number):
        raise PhoneNumberError("not a phone number (impossible length for its country)")
    if not phonenumbers.is_valid_number(number):
        region = phonenumbers.region_code_for_country_code(number.country_code or 0)
        if region == phonenumbers.UNKNOWN_REGION:
            raise PhoneNumberError("not a phone number (unknown country code)")
        raise PhoneNumberError(f"not a valid phone number for region {region}")
    return phonenumbers.format_number(number, phonenumbers.PhoneNumberFormat.E164)


def region_of(e164: str) -> str | None:
    """The ISO 3166 region of an E.164 number (`+49...` -> "DE"), None if it has none."""
    import phonenumbers

    try:
        region = phonenumbers.region_code_for_number(phonenumbers.parse(e164, None))
    except phonenumbers.NumberParseException:
        return None
    return None if region in (None, phonenumbers.UNKNOWN_REGION) else str(region)
