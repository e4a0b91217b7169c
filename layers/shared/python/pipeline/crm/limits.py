"""The CRMs' documented API rate limits: what the catch-up sweep paces its reads by, and what the
local stand-ins enforce (`local.fakes.rate_limit`). One source for both.

- amoCRM (Kommo), "Limitations" of the API docs: no more than 7 requests a second per account;
  past it the API answers 429 (and repeated abuse blocks the address).
- Bitrix24, "REST API limits" (apidocs.bitrix24.ru/limits.html): a leaky bucket per portal; each
  request adds one, 2 drain a second, and past 50 (250 and 5 on Enterprise plans) a request is
  refused with HTTP 503 `QUERY_LIMIT_EXCEEDED`.
"""

from __future__ import annotations

AMOCRM_REQUESTS_PER_SECOND = 7.0
AMOCRM_BURST = 7
BITRIX24_REQUESTS_PER_SECOND = 2.0
BITRIX24_BURST = 50
