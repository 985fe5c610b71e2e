"""One AMQP channel (core.Channel) and its parts."""

from .core import Channel

__all__ = ["Channel"]
