"""rabbit_stream_queue:declare/2's own checks, after the arguments' and the
durability checks (vhost.py): a segment may not exceed 3 GB, a Bloom
filter is 16 to 255 bytes; and this broker's: a stream's and its virtual
host's names at most 127 bytes (RabbitMQ takes 255).  (A clustered leader replicates a stream as any
durable queue: its log rides on the message store's flushes.)"""

from __future__ import annotations

from policies.stream_rules import FILTER_SIZE_RANGE, MAX_SEGMENT_SIZE

from ...errors import precondition_failed
from ...wire.table import FieldTable, typed_value

# A stream's log lives in a directory named by the hex of its vhost's and
# its own name (storage/message_store.py): 255 characters at most.
MAX_NAME_BYTES = 127


def check_stream_declare(arguments: FieldTable, what: str, vhost: str, name: str) -> None:
    for whose, text in (("its virtual host's name", vhost), ("its name", name)):
        if len(text.encode()) > MAX_NAME_BYTES:
            raise precondition_failed(
                f"{what}: a stream's log is named by {whose}, which may hold at most "
                f"{MAX_NAME_BYTES} bytes here")
    size = typed_value(arguments, "x-stream-max-segment-size-bytes")
    if size is not None and size[1] > MAX_SEGMENT_SIZE:
        raise precondition_failed("Exceeded max value for x-stream-max-segment-size-bytes")
    size = typed_value(arguments, "x-stream-filter-size-bytes")
    if size is not None and not (isinstance(size[1], int) and not isinstance(size[1], bool)
                                 and FILTER_SIZE_RANGE[0] <= size[1] <= FILTER_SIZE_RANGE[1]):
        # 3.13.7's words, two spaces included (a value of any type that is
        # not an integer in range: Erlang orders every other term above 255).
        raise precondition_failed("Invalid value for  x-stream-filter-size-bytes")
