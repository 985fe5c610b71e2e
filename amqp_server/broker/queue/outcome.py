"""What a queue answers to a message offered to it: one of two members of
an enum, compared by identity, never equal to a string (a death reason is
the string "rejected")."""

from __future__ import annotations

from enum import Enum


class Offer(Enum):
    TAKEN = "taken"
    REFUSED = "refused"  # overflow reject-publish: the publisher gets a nack


TAKEN = Offer.TAKEN
REFUSED = Offer.REFUSED
