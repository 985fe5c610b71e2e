"""What a queue answers to a message offered to it."""

ACCEPTED = "accepted"
REJECTED = "rejected"  # overflow reject-publish: the publisher gets a nack
