"""erlang:phash2/2 of a list of binaries: the hash RabbitMQ's x-modulus-hash
exchange picks a destination with (rabbit_exchange_type_modulus_hash:route/3
hashes a message's routing keys), so a routing key goes to the destination
RabbitMQ would send it to.

OTP's make_hash2 (erts/emulator/beam/erl_term_hashing.c), for the terms a
list of routing keys holds: a list walks its cells, each binary is
`block_hash`ed (Bob Jenkins' lookup2, seeded with HCONST_13 + the hash so
far), the final [] mixes in NIL; phash2/2 then reduces the 32-bit hash to
the range (a mask for a power of two).  Checked against Erlang's own in
tests/test_modulus_hash_exchange.py.
"""

from __future__ import annotations

_MASK = 0xFFFFFFFF
HCONST = 0x9E3779B9     # the golden ratio
HCONST_2 = 0x3C6EF372   # (HCONST * 2) mod 2^32
HCONST_13 = 0x08D12E65  # (HCONST * 13) mod 2^32
# make_hash2 of [] alone, and the word UINT32_HASH(NIL_DEF, HCONST_2) mixes
# in for the [] that ends a list (both found by asking Erlang itself).
_NIL_ALONE = 3468870702
_NIL_WORD = 2


def _mix(a: int, b: int, c: int) -> tuple[int, int, int]:
    a = (a - b - c) & _MASK
    a ^= c >> 13
    b = (b - c - a) & _MASK
    b ^= (a << 8) & _MASK
    c = (c - a - b) & _MASK
    c ^= b >> 13
    a = (a - b - c) & _MASK
    a ^= c >> 12
    b = (b - c - a) & _MASK
    b ^= (a << 16) & _MASK
    c = (c - a - b) & _MASK
    c ^= b >> 5
    a = (a - b - c) & _MASK
    a ^= c >> 3
    b = (b - c - a) & _MASK
    b ^= (a << 10) & _MASK
    c = (c - a - b) & _MASK
    c ^= b >> 15
    return a, b, c


def _block_hash(data: bytes, initval: int) -> int:
    a = b = HCONST
    c = initval & _MASK
    length = len(data)
    full = length - length % 12
    for at in range(0, full, 12):
        a = (a + int.from_bytes(data[at:at + 4], "little")) & _MASK
        b = (b + int.from_bytes(data[at + 4:at + 8], "little")) & _MASK
        c = (c + int.from_bytes(data[at + 8:at + 12], "little")) & _MASK
        a, b, c = _mix(a, b, c)
    tail = data[full:]
    c = (c + length) & _MASK
    # The tail's bytes fill a, then b, then c from its second byte on (the
    # first byte of c is the length's).
    a = (a + int.from_bytes(tail[0:4], "little")) & _MASK
    b = (b + int.from_bytes(tail[4:8], "little")) & _MASK
    c = (c + (int.from_bytes(tail[8:11], "little") << 8)) & _MASK
    return _mix(a, b, c)[2]


def _uint32_hash(value: int, const: int, hash_: int) -> int:
    """UINT32_HASH(value, const): mixed into the hash so far."""
    a = (const + value) & _MASK
    b = const
    return _mix(a, b, hash_)[2]


def make_hash2(binaries: list[bytes]) -> int:
    """make_hash2 of a list of binaries (32 bits)."""
    hash_ = 0
    for binary in binaries:
        seed = (HCONST_13 + hash_) & _MASK
        # An empty binary is its seed (no block is hashed).
        hash_ = _block_hash(binary, seed) if binary else seed
    if hash_ == 0:
        return _NIL_ALONE
    return _uint32_hash(_NIL_WORD, HCONST_2, hash_)


def phash2(binaries: list[bytes], range_: int) -> int:
    """erlang:phash2(Binaries, Range)."""
    hash_ = make_hash2(binaries)
    if range_ & (range_ - 1) == 0:
        return hash_ & (range_ - 1)
    return hash_ % range_
