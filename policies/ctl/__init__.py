"""amqpctl: a rabbitmqctl-like CLI that talks to the broker's management API.

    amqpctl set_policy [--priority N] [--apply-to T] NAME PATTERN DEFINITION [-p VHOST]
    amqpctl list_queues [-p VHOST] [name messages policy ...]

Output is tab-separated with a header row, or JSON with --formatter json.
Failures print one `Error:` line to stderr and exit with rabbitmqctl's codes
(64 usage, 65 bad data, 69 broker unreachable or not amqp-server, 77 access
refused).

Modules: `api` (the HTTP client and what its answers mean), `output`
(tables, progress lines, errors and exit codes), one module per group of
verbs (`policy`, `objects`, `access`, `runtime`, `dead_letters`), and
`main` (the command line), which nothing imports but this package.
"""

from .main import main
from .output import EX_DATAERR, EX_NOPERM, EX_UNAVAILABLE, EX_USAGE, CtlError

__all__ = ["EX_DATAERR", "EX_NOPERM", "EX_UNAVAILABLE", "EX_USAGE", "CtlError", "main"]
