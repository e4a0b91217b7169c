"""Order-status SMS notifications, sent at most once per notification through a send journal.

- `rules`: which status transitions send an SMS, and its text (the team's configuration,
  `team/sms_rules.json`).
- `journal`: one DynamoDB record per notification, created before any gateway call; its
  state (pending, sending, accepted, failed, unknown) says what may happen next.
- `gateways`: AWS End User Messaging SMS, a generic HTTP gateway and an in-memory fake.
- `service`: the `sms` consumer's `process`; `reconcile`: the scheduled reconciler of
  `unknown` outcomes and of `pending` records no SQS message will send (an operator's resend,
  an orphan); `delivery`: delivery events from End User Messaging.

Operators act on records with `python -m ops journal show|unknown|resolve`.
"""
