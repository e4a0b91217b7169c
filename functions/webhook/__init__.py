"""Webhook Lambda: receives Telegram updates and CRM events and publishes them to SNS."""
