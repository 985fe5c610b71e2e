"""Publishes that follow one another to the same exchange and routing key,
found in a read in one pass.

Clients publishing in a loop send the same basic.publish method frame again
and again.  Often the properties repeat too, only the bodies differing:
finding such a run costs one byte comparison per publish of everything up
to its body (`repeated_publishes`).  Applications that give each message its
own id, timestamp or headers still repeat the method frame
(`following_publishes`).  Either run is routed once and queued together
(Channel.publish_run).
"""

from __future__ import annotations

import struct

from ..wire.properties import scan_properties

_BODY_SIZE = struct.Struct(">Q")
_U32 = struct.Struct(">I")


def repeated_publishes(data: bytes, start: int, header_at: int, header: bytes, pos: int,
                       end: int, largest: int) -> tuple[list, list, int]:
    """The publishes from `pos` on that repeat the one whose method frame
    starts at `start` and content header frame (payload `header`) at
    `header_at`, followed by one body frame: the same method frame and
    properties, with a body of any size up to `largest` in one frame.
    Returns their content header payloads (one object per body size),
    their bodies, and where the next frame starts.

    Each body size met is checked once; after that, a publish is one byte
    comparison of everything up to its body."""
    body_at = header_at + 8 + len(header)
    method = data[start:header_at]
    lead = data[header_at : header_at + 11]  # frame header, class id, weight
    tail = data[header_at + 19 : body_at]  # property flags and values, frame end
    body_lead = data[body_at : body_at + 3]  # frame type and channel
    size_at = header_at + 11 - start  # a publish's body size, from its start
    before_body = data[start : body_at + 7]
    (last_size,) = _BODY_SIZE.unpack_from(header, 4)
    layouts = {last_size: (header, before_body)}
    step = len(before_body) + last_size + 1
    headers: list[bytes] = []
    bodies: list[bytes] = []
    startswith = data.startswith
    while True:
        if pos + step <= end and startswith(before_body, pos) and data[pos + step - 1] == 0xCE:
            headers.append(header)
            bodies.append(data[pos + len(before_body) : pos + step - 1])
            pos += step
            continue
        if pos + size_at + 8 > end:
            break
        (size,) = _BODY_SIZE.unpack_from(data, pos + size_at)
        if size == last_size:
            break  # not a repeat
        layout = layouts.get(size)
        if layout is None:
            header_at = pos + len(method)
            body_at = header_at + 19 + len(tail)
            if (not 0 < size <= largest or body_at + 7 > end
                    or not startswith(method, pos) or not startswith(lead, header_at)
                    or not startswith(tail, header_at + 19)
                    or not startswith(body_lead, body_at)
                    or _U32.unpack_from(data, body_at + 3)[0] != size):
                break
            layout = layouts[size] = (data[header_at + 7 : body_at - 1],
                                      data[pos : body_at + 7])
        header, before_body = layout
        last_size = size
        step = len(before_body) + size + 1
    return headers, bodies, pos


_FRAME_HEADER = struct.Struct(">BHI")
_CLASS_60 = b"\x00\x3c"


def following_publishes(data: bytes, method: bytes, header: bytes, layout, pos: int,
                        end: int, channel: int, largest: int) -> tuple[list, list, list, int]:
    """The publishes from `pos` on, after one with content header `header`
    (`layout`, from scan_properties), whose method frame is `method` (bytes,
    frame header to frame end), each with a content header of class 60
    whose properties pass `scan_properties` and one body frame of 1 to
    `largest` octets.  Returns their content header payloads, the layouts
    scan_properties found, their bodies and where the next frame starts;
    anything else ends the run, to be read (and refused if need be) one
    frame at a time."""
    headers: list[bytes] = []
    layouts: list = []
    bodies: list[bytes] = []
    seen: dict[bytes, tuple] = {header: (header, layout)}
    length = len(method)
    unpack = _FRAME_HEADER.unpack_from
    startswith = data.startswith
    while startswith(method, pos):
        at = pos + length
        if at + 7 > end:
            break
        frame_type, number, size = unpack(data, at)
        header_end = at + 7 + size
        if (frame_type != 2 or number != channel or size < 14 or size > largest
                or header_end + 8 >= end or data[header_end] != 0xCE
                or not startswith(_CLASS_60, at + 7)):
            break
        (body_size,) = _BODY_SIZE.unpack_from(data, at + 11)
        frame_type, number, size = unpack(data, header_end + 1)
        body_end = header_end + 8 + size
        if (frame_type != 3 or number != channel or size != body_size
                or not 0 < size <= largest or body_end >= end or data[body_end] != 0xCE):
            break
        header = data[at + 7:header_end]
        known = seen.get(header)
        if known is not None:
            header, layout = known  # messages alike share one header (and its checks)
        else:
            try:
                layout = scan_properties(header, 12)
            except ValueError:
                break
            seen[header] = (header, layout)
        headers.append(header)
        layouts.append(layout)
        bodies.append(data[header_end + 8:body_end])
        pos = body_end + 1
    return headers, layouts, bodies, pos
