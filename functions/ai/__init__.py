"""AI consumer: classifies intent and extracts lead fields from messages with Amazon Bedrock."""
