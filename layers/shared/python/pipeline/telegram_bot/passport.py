"""Telegram Passport's cryptography, loaded when a bot uses Passport, not with every cold start.

python-telegram-bot imports `cryptography` when it can, for Passport alone (decrypting the data a
user shares through Telegram Passport, with the bot's private key). The bot's layer ships PTB
without its `passport` extra, but AWS's Powertools layer carries `cryptography` (for its data
masking), and every function runs with that layer: so PTB's import loaded it at every cold start,
about 12 ms, 0.09x of `import boto3` (docs/perf.md), for a feature few bots use.

`deferred()` hides `cryptography` from PTB's first import, as if it were not installed; PTB then
keeps `CRYPTO_INSTALLED = False` and `None` for each name it would have imported. `enable()`, run
when an Application is given a private key (`PipelineBuilder.private_key`), imports them and puts
them where PTB's import would have (`telegram._bot`, `telegram._passport.credentials`, as of the
pinned 22.8: tests/unit/consumers/test_bot_passport.py decrypts a Passport payload through PTB).
Anything else may import `cryptography` at any time: only PTB's own import is kept from it.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from importlib.machinery import ModuleSpec
from typing import Any

HIDDEN = "cryptography"
# PTB's modules and the names each imports from cryptography (python-telegram-bot 22.8).
_PTB_NAMES: dict[str, dict[str, str]] = {
    "telegram._bot": {
        "default_backend": "cryptography.hazmat.backends",
        "serialization": "cryptography.hazmat.primitives",
    },
    "telegram._passport.credentials": {
        "default_backend": "cryptography.hazmat.backends",
        "MGF1": "cryptography.hazmat.primitives.asymmetric.padding",
        "OAEP": "cryptography.hazmat.primitives.asymmetric.padding",
        "Cipher": "cryptography.hazmat.primitives.ciphers",
        "AES": "cryptography.hazmat.primitives.ciphers.algorithms",
        "CBC": "cryptography.hazmat.primitives.ciphers.modes",
        "SHA1": "cryptography.hazmat.primitives.hashes",
        "SHA256": "cryptography.hazmat.primitives.hashes",
        "SHA512": "cryptography.hazmat.primitives.hashes",
        "Hash": "cryptography.hazmat.primitives.hashes",
    },
}


class _Hidden:
    """A meta path finder before all others: `cryptography` cannot be found while it is in place."""

    @staticmethod
    def find_spec(name: str, path: Any = None, target: Any = None) -> ModuleSpec | None:
        if name == HIDDEN or name.startswith(f"{HIDDEN}."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


@contextmanager
def deferred() -> Iterator[None]:
    """PTB's first import, inside this block, without `cryptography` (module docstring). No effect
    when PTB or `cryptography` is imported already."""
    if "telegram" in sys.modules or HIDDEN in sys.modules:
        yield
        return
    sys.meta_path.insert(0, _Hidden)  # type: ignore[arg-type]
    try:
        yield
    finally:
        sys.meta_path.remove(_Hidden)  # type: ignore[arg-type]


def enabled() -> bool:
    """Whether PTB can use Passport now (its `CRYPTO_INSTALLED`)."""
    return all(getattr(sys.modules.get(name), "CRYPTO_INSTALLED", False) for name in _PTB_NAMES)


def enable() -> None:
    """Gives PTB what its import would have found; raises ImportError if `cryptography` is not
    installed at all (PTB without its `passport` extra, and no layer that carries it)."""
    if enabled():
        return
    for module_name, names in _PTB_NAMES.items():
        module = importlib.import_module(module_name)
        for name, source in names.items():
            found = importlib.import_module(source)
            # A class of `source`, or (`serialization`) a module below it.
            value = getattr(found, name, None) or importlib.import_module(f"{source}.{name}")
            setattr(module, name, value)
        module.CRYPTO_INSTALLED = True  # type: ignore[attr-defined]
