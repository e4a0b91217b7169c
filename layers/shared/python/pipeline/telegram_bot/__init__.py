"""The `bot` consumer's runtime: the user's python-telegram-bot Application on this pipeline.

Only the bot function has python-telegram-bot (its own layer): `reference` imports none of it
(the stack and the local runtime read it), the other modules import `telegram` and are imported
by the bot function alone.
"""
