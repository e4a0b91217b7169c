"""The CRM family: how CRM order-status changes enter the pipeline and become order events.

- `contract`: the JSON contract a templated CRM posts to `POST /crm/events` (`CrmEvent`), its
  request signature and token auth; every CRM order event is validated with it.
- `order_events`: the order-status event a CRM source's consumer publishes (that contract, built
  from the CRM's own data).
- `status_map`: a deployment's map of a CRM's pipeline stages to order statuses.
- `forms`: the form-encoded, PHP-bracketed bodies Bitrix24 and amoCRM post.
- `bitrix24`, `amocrm`: each vendor's webhooks in and API out.
- `sources`: what the two vendors' consumers share (mapping, refusals, publishing).
- `sync`: the one driver both vendors' consumers run: an order's transitions read from the CRM's
  history, published once each.
- `sweep`: the scheduled catch-up that asks the consumers to sync orders whose webhook never came.

Nothing is imported here: importing one module (`infra` reads `status_map` at synth) loads only
what that module needs, and no import cycle can hide in this file.
"""
