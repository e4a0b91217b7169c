"""Shared code of the event pipeline, shipped to every Lambda as the `shared` layer.

Nothing here calls AWS at import time: clients are created lazily (see `pipeline.aws`) so that
tests and the local runtime can point them at moto before first use.
"""
