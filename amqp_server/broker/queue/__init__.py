"""A queue, built from parts that own their state (DESIGN.md, "A queue is
built from parts"): `ordering` (which ready message is next), `dispatch`
(which consumer gets it), `limits` (length limits, TTL, x-expires),
`redelivery` (returns, delays, delivery limits, held dead letters),
`paging` (which ready messages live in page files) and `selection` (the
workbench's withdrawals).  `core.Queue` composes them; its decisions come
back as `effects`, which it carries out once decided."""

from .core import Queue
from .outcome import REFUSED, TAKEN

__all__ = ["REFUSED", "TAKEN", "Queue"]
