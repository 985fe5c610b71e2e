"""AMQP exceptions: a reply code, RabbitMQ's wording, and what they close.

The 0-9-1 spec splits reply codes into soft errors, which close only the
channel, and hard errors, which close the whole connection.  RabbitMQ prefixes
every reply text with the code's name ("NOT_FOUND - no queue 'q' in vhost
'/'"), and clients show that text to users, so we do the same.
"""

from __future__ import annotations

REPLY_SUCCESS = 200
CONTENT_TOO_LARGE = 311
NO_ROUTE = 312
NO_CONSUMERS = 313
CONNECTION_FORCED = 320
INVALID_PATH = 402
ACCESS_REFUSED = 403
NOT_FOUND = 404
RESOURCE_LOCKED = 405
PRECONDITION_FAILED = 406
FRAME_ERROR = 501
SYNTAX_ERROR = 502
COMMAND_INVALID = 503
CHANNEL_ERROR = 504
UNEXPECTED_FRAME = 505
RESOURCE_ERROR = 506
NOT_ALLOWED = 530
NOT_IMPLEMENTED = 540
INTERNAL_ERROR = 541

NAMES = {
    CONTENT_TOO_LARGE: "CONTENT_TOO_LARGE",
    NO_ROUTE: "NO_ROUTE",
    NO_CONSUMERS: "NO_CONSUMERS",
    CONNECTION_FORCED: "CONNECTION_FORCED",
    INVALID_PATH: "INVALID_PATH",
    ACCESS_REFUSED: "ACCESS_REFUSED",
    NOT_FOUND: "NOT_FOUND",
    RESOURCE_LOCKED: "RESOURCE_LOCKED",
    PRECONDITION_FAILED: "PRECONDITION_FAILED",
    FRAME_ERROR: "FRAME_ERROR",
    SYNTAX_ERROR: "SYNTAX_ERROR",
    COMMAND_INVALID: "COMMAND_INVALID",
    CHANNEL_ERROR: "CHANNEL_ERROR",
    UNEXPECTED_FRAME: "UNEXPECTED_FRAME",
    RESOURCE_ERROR: "RESOURCE_ERROR",
    NOT_ALLOWED: "NOT_ALLOWED",
    NOT_IMPLEMENTED: "NOT_IMPLEMENTED",
    INTERNAL_ERROR: "INTERNAL_ERROR",
}

SOFT_ERRORS = frozenset({CONTENT_TOO_LARGE, NO_ROUTE, NO_CONSUMERS, ACCESS_REFUSED,
                         NOT_FOUND, RESOURCE_LOCKED, PRECONDITION_FAILED})


class AMQPError(Exception):
    """An error the broker reports to the peer with a close method."""

    def __init__(self, code: int, explanation: str, class_id: int = 0,
                 method_id: int = 0) -> None:
        self.code = code
        self.explanation = explanation
        self.class_id = class_id
        self.method_id = method_id
        super().__init__(self.reply_text)

    @property
    def reply_text(self) -> str:
        text = f"{NAMES.get(self.code, str(self.code))} - {self.explanation}"
        # reply-text is a shortstr: past 255 bytes RabbitMQ keeps 252 and
        # adds "..." (rabbit_binary_generator:amqp_exception_explanation/2;
        # 4.x's io_lib chars_limit gives the same).  Names that were not
        # UTF-8 on the wire show their bytes escaped.
        encoded = text.encode("utf-8", "backslashreplace")
        if len(encoded) > 255:
            return encoded[:252].decode("utf-8", "ignore") + "..."
        return encoded.decode("utf-8")

    @property
    def closes_connection(self) -> bool:
        return self.code not in SOFT_ERRORS

    def for_method(self, class_id: int, method_id: int) -> AMQPError:
        if not self.class_id:
            self.class_id, self.method_id = class_id, method_id
        return self


def not_found(text: str) -> AMQPError:
    return AMQPError(NOT_FOUND, text)


def access_refused(text: str) -> AMQPError:
    return AMQPError(ACCESS_REFUSED, text)


def precondition_failed(text: str) -> AMQPError:
    return AMQPError(PRECONDITION_FAILED, text)


def resource_locked(text: str) -> AMQPError:
    return AMQPError(RESOURCE_LOCKED, text)


def not_allowed(text: str) -> AMQPError:
    return AMQPError(NOT_ALLOWED, text)


def not_implemented(text: str) -> AMQPError:
    return AMQPError(NOT_IMPLEMENTED, text)


def channel_error(text: str) -> AMQPError:
    return AMQPError(CHANNEL_ERROR, text)


def command_invalid(text: str) -> AMQPError:
    return AMQPError(COMMAND_INVALID, text)


def frame_error(text: str) -> AMQPError:
    return AMQPError(FRAME_ERROR, text)


def syntax_error(text: str) -> AMQPError:
    return AMQPError(SYNTAX_ERROR, text)


def unexpected_frame(text: str) -> AMQPError:
    return AMQPError(UNEXPECTED_FRAME, text)


def resource_name(kind: str, name: str, vhost: str) -> str:
    """RabbitMQ's rabbit_misc:rs/1: "queue 'q' in vhost '/'"."""
    return f"{kind} '{name}' in vhost '{vhost}'"
