"""What one record of the dead-letter archive holds: the dead-letter
event's fields (dlx/events.py) and one more, the AMQP content header as
stored, from which a redrive rebuilds the message's properties byte for
byte.  Shared by the archive's files (archive.py) and their Parquet format
(archive_parquet.py), which loads pyarrow and so is imported only where
the archive is written or read."""

from __future__ import annotations

from dlx.events import FIELD_NAMES

CONTENT_HEADER = "content_header"
RECORD_FIELDS = (*FIELD_NAMES, CONTENT_HEADER)
