"""CRM consumer: turns a new Telegram contact into a lead in the configured CRM."""
