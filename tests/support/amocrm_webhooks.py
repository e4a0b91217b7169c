"""amoCRM "lead status changed" webhook bodies of any size, in the vendor's form shape.

The shape is that of `tests/fixtures/crm/amocrm/lead_status_two_leads.form` (see its README) with
the lead's custom fields between `account_id` and `created_at`, as bodies captured from real
accounts carry them: `leads[status][<n>][custom_fields][<k>][id]`, `[name]`, `[code]` (system
fields only), `[values][<v>][value]` and, for list fields, `[values][<v>][enum]`. Every value is
fake; no custom field holds a phone number.
"""

from __future__ import annotations

from urllib.parse import urlencode

ACCOUNT_ID = 31415926
SUBDOMAIN = "exampleshop"
PIPELINE_ID = 7391542
OLD_STATUS_ID = 61482546
STATUS_ID = 61482550
FIRST_LEAD_ID = 21805000
USER_ID = 9081726
CHANGED_AT = 1704784507

Pairs = list[tuple[str, str]]


def custom_fields(lead: str, count: int) -> Pairs:
    """`count` custom fields of one lead (`lead` is its `leads[status][<n>]` prefix), cycling
    through the kinds an account has: text, number, select (value and enum), multiselect."""
    pairs: Pairs = []
    for k in range(count):
        field = f"{lead}[custom_fields][{k}]"
        pairs += [(f"{field}[id]", str(1425000 + k)), (f"{field}[name]", f"Поле {k}")]
        kind = k % 4
        if kind == 0:
            pairs.append((f"{field}[values][0][value]", "Самовывоз, пункт на Немиге"))
        elif kind == 1:
            pairs.append((f"{field}[values][0][value]", str(100 + k)))
        elif kind == 2:
            pairs += [
                (f"{field}[values][0][value]", "Оплачен"),
                (f"{field}[values][0][enum]", str(718000 + k)),
            ]
        else:
            for v in range(2):
                pairs += [
                    (f"{field}[values][{v}][value]", f"Вариант {v}"),
                    (f"{field}[values][{v}][enum]", str(719000 + v)),
                ]
    return pairs


def lead_fields(index: int, lead_id: int, custom_field_count: int) -> Pairs:
    """One `leads[status][<index>]` entry, in amoCRM's field order."""
    lead = f"leads[status][{index}]"
    return [
        (f"{lead}[id]", str(lead_id)),
        (f"{lead}[name]", f"Заказ #{lead_id % 10000}"),
        (f"{lead}[status_id]", str(STATUS_ID)),
        (f"{lead}[old_status_id]", str(OLD_STATUS_ID)),
        (f"{lead}[price]", "12900"),
        (f"{lead}[responsible_user_id]", str(USER_ID)),
        (f"{lead}[last_modified]", str(CHANGED_AT)),
        (f"{lead}[modified_user_id]", str(USER_ID)),
        (f"{lead}[created_user_id]", str(USER_ID)),
        (f"{lead}[date_create]", "1704700800"),
        (f"{lead}[pipeline_id]", str(PIPELINE_ID)),
        (f"{lead}[old_pipeline_id]", str(PIPELINE_ID)),
        (f"{lead}[account_id]", str(ACCOUNT_ID)),
        *custom_fields(lead, custom_field_count),
        (f"{lead}[created_at]", "1704700800"),
        (f"{lead}[updated_at]", str(CHANGED_AT)),
    ]


def account_fields() -> Pairs:
    return [
        ("account[subdomain]", SUBDOMAIN),
        ("account[id]", str(ACCOUNT_ID)),
        ("account[_links][self]", f"https://{SUBDOMAIN}.amocrm.ru"),
    ]


def status_batch_pairs(leads: int, custom_fields_per_lead: int) -> Pairs:
    """The fields of one webhook moving `leads` leads (ids FIRST_LEAD_ID, +1, ...) from
    OLD_STATUS_ID to STATUS_ID, each with `custom_fields_per_lead` custom fields."""
    pairs: Pairs = []
    for index in range(leads):
        pairs += lead_fields(index, FIRST_LEAD_ID + index, custom_fields_per_lead)
    return pairs + account_fields()


def form(pairs: Pairs) -> str:
    """The body as amoCRM posts it: brackets percent-encoded, spaces as `+`."""
    return urlencode(pairs)


def status_batch(leads: int, custom_fields_per_lead: int) -> str:
    return form(status_batch_pairs(leads, custom_fields_per_lead))
