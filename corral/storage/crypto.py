"""Secret encryption: AES-256-GCM envelopes under a key-encryption key (KEK).

Each value gets its own random data key; the data key is wrapped by the KEK. The
owning tenant and record id are bound as associated data, so a ciphertext copied
to another record or tenant fails to decrypt instead of leaking.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

_VERSION = b"\x01"
_NONCE = 12
_WRAPPED_KEY = 32 + 16


class DecryptionError(Exception):
    """The ciphertext was tampered with, or belongs to another tenant or record."""


def associated_data(tenant_id: str, record_id: str, purpose: str = "") -> bytes:
    return f"corral/v1|{purpose}|{tenant_id}|{record_id}".encode()


class SecretBox:
    def __init__(self, kek: bytes) -> None:
        if len(kek) != 32:
            raise ValueError("the key-encryption key must be 32 bytes")
        self._kek = AESGCM(kek)

    def encrypt(self, plaintext: bytes, aad: bytes) -> bytes:
        data_key = AESGCM.generate_key(bit_length=256)
        key_nonce, value_nonce = os.urandom(_NONCE), os.urandom(_NONCE)
        wrapped = self._kek.encrypt(key_nonce, data_key, aad)
        sealed = AESGCM(data_key).encrypt(value_nonce, plaintext, aad)
        return _VERSION + key_nonce + wrapped + value_nonce + sealed

    def decrypt(self, blob: bytes, aad: bytes) -> bytes:
        blob = bytes(blob)
        if not blob.startswith(_VERSION):
            raise DecryptionError("unknown envelope version")
        offset = 1
        key_nonce = blob[offset : offset + _NONCE]
        offset += _NONCE
        wrapped = blob[offset : offset + _WRAPPED_KEY]
        offset += _WRAPPED_KEY
        value_nonce = blob[offset : offset + _NONCE]
        sealed = blob[offset + _NONCE :]
        try:
            data_key = self._kek.decrypt(key_nonce, wrapped, aad)
            return AESGCM(data_key).decrypt(value_nonce, sealed, aad)
        except InvalidTag as exc:
            raise DecryptionError("secret does not decrypt for this record") from exc

    def encrypt_text(self, plaintext: str, aad: bytes) -> bytes:
        return self.encrypt(plaintext.encode(), aad)

    def decrypt_text(self, blob: bytes, aad: bytes) -> str:
        return self.decrypt(blob, aad).decode()


def load_or_create_kek(path: Path) -> bytes:
    """The KEK from `CORRAL_KEK` (64 hex digits) or a 0600 file created on first start."""
    from_env = os.environ.get("CORRAL_KEK")
    if from_env:
        return bytes.fromhex(from_env)
    if path.exists():
        return bytes.fromhex(path.read_text().strip())
    path.parent.mkdir(parents=True, exist_ok=True)
    key = secrets.token_bytes(32)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(key.hex())
    return key
