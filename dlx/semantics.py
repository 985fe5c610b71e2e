"""Which RabbitMQ's behaviour the broker follows: 3.13's (the default) or
4.3's (docs/choosing-semantics.md).

The mode is data, passed to each decision that differs (a queue's
effective settings carry it, the dead-letterer reads it from there), never
a global: one broker may serve a 3.13 virtual host beside a 4.3 one.
"""

from __future__ import annotations

RABBITMQ_3_13 = "3.13"
RABBITMQ_4_3 = "4.3"
MODES = (RABBITMQ_3_13, RABBITMQ_4_3)
DEFAULT = RABBITMQ_3_13


def is_4x(semantics: str) -> bool:
    """RabbitMQ 4.x's rules apply (4.3 is the one 4.x built here)."""
    return semantics == RABBITMQ_4_3


def semantics_problem(value: object) -> str | None:
    """Why `value` names no mode, in plain words; None when it names one."""
    if isinstance(value, str) and value in MODES:
        return None
    shown = f'"{value}"' if isinstance(value, str) else repr(value)
    return f'rabbitmq_semantics must be "3.13" or "4.3", got {shown}'
