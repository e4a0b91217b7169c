"""Telegram Passport without cryptography at every cold start (`pipeline.telegram_bot.passport`):
the bot's init keeps PTB's import from `cryptography`, and an Application given a private key gets
it back, so Passport data still decrypts through PTB. Each case runs in a fresh interpreter: this
test process imported PTB (with cryptography) long ago."""

from __future__ import annotations

import json

from tests.support.imports import run_fresh

# A Passport payload made as Telegram makes one (core.telegram.org/passport#decrypting-data),
# then read back through PTB with the bot's key.
_DECRYPT_THROUGH_PTB = """
import base64, hashlib, json, os, sys
import bot.app  # the bot's init, as Lambda runs it
report = {"cryptography_after_init": "cryptography" in sys.modules}
import telegram._bot
report["ptb_crypto_after_init"] = telegram._bot.CRYPTO_INSTALLED

from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
from telegram import EncryptedCredentials
from pipeline.telegram_bot.engine import configured_builder, bot_request
from pipeline.telegram_bot.persistence import DynamoDBPersistence

key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                        serialization.NoEncryption())
builder = configured_builder("1:placeholder", DynamoDBPersistence(), bot_request())
application = builder.private_key(pem).build()

credentials = json.dumps({"secure_data": {}, "nonce": "order-42"}).encode()
pad = 32 + (-(len(credentials) + 32) % 16)
padded = bytes([pad]) + os.urandom(pad - 1) + credentials
data_hash = hashlib.sha256(padded).digest()
secret = os.urandom(32)
derived = hashlib.sha512(secret + data_hash).digest()
encryptor = Cipher(algorithms.AES(derived[:32]), modes.CBC(derived[32:48])).encryptor()
oaep = padding.OAEP(mgf=padding.MGF1(algorithm=hashes.SHA1()), algorithm=hashes.SHA1(), label=None)
encrypted = EncryptedCredentials(
    data=base64.b64encode(encryptor.update(padded) + encryptor.finalize()).decode(),
    hash=base64.b64encode(data_hash).decode(),
    secret=base64.b64encode(key.public_key().encrypt(secret, oaep)).decode(),
)
encrypted.set_bot(application.bot)
report["nonce"] = encrypted.decrypted_data.nonce
print(json.dumps(report))
"""


def test_the_bots_init_leaves_cryptography_out_and_a_private_key_brings_passport_back() -> None:
    report = json.loads(run_fresh(_DECRYPT_THROUGH_PTB))
    assert report["cryptography_after_init"] is False
    assert report["ptb_crypto_after_init"] is False
    assert report["nonce"] == "order-42"  # decrypted by PTB's Passport code, with the bot's key


def test_the_teams_own_code_may_import_cryptography_after_the_init() -> None:
    """Only PTB's own import is kept from it."""
    script = "import bot.app, cryptography.hazmat.primitives.hashes as h; print(h.SHA256().name)"
    assert run_fresh(script).strip() == "sha256"


def test_without_cryptography_installed_a_private_key_is_refused_naming_the_fix() -> None:
    """No layer ships it (AWS's Powertools layer without it, PTB without its passport extra)."""
    script = """
import sys
class NoCryptography:
    @staticmethod
    def find_spec(name, path=None, target=None):
        if name.split(".")[0] == "cryptography":
            raise ModuleNotFoundError(name, name=name)
sys.meta_path.insert(0, NoCryptography)
import bot.app
from pipeline.telegram_bot.engine import configured_builder, bot_request
from pipeline.telegram_bot.inspection import ApplicationRefused
from pipeline.telegram_bot.persistence import DynamoDBPersistence
try:
    configured_builder("1:placeholder", DynamoDBPersistence(), bot_request()).private_key(b"pem")
except ApplicationRefused as refused:
    print(refused)
"""
    refusal = run_fresh(script).strip()
    assert refusal.startswith("BOT_APPLICATION: Telegram Passport (.private_key()) needs the cryptography")
    assert "python-telegram-bot[passport]" in refusal
