"""An AMQP 0-9-1 broker whose reason to exist is messages that cannot be delivered."""

__version__ = "0.1.0"
