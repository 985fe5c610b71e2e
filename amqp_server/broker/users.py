"""Users and their password hashes, stored as RabbitMQ stores them
(rabbit_password_hashing_sha256: base64 of a 4-byte salt followed by
SHA-256(salt + password)), so definitions move between the two brokers."""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
from dataclasses import dataclass

HASHING_ALGORITHM = "rabbit_password_hashing_sha256"


def hash_password(password: str, salt: bytes | None = None) -> str:
    salt = os.urandom(4) if salt is None else salt
    digest = hashlib.sha256(salt + password.encode("utf-8")).digest()
    return base64.b64encode(salt + digest).decode()


def password_matches(password_hash: str, password: str) -> bool:
    try:
        raw = base64.b64decode(password_hash, validate=True)
    except ValueError:
        return False
    if len(raw) != 36:
        return False
    return hmac.compare_digest(hash_password(password, raw[:4]), password_hash)


@dataclass
class User:
    name: str
    password_hash: str
    tags: tuple[str, ...] = ()

    @classmethod
    def with_password(cls, name: str, password: str, tags: tuple[str, ...] = ()) -> User:
        return cls(name, hash_password(password), tuple(tags))

    def check_password(self, password: str) -> bool:
        return password_matches(self.password_hash, password)
