"""Errors of the remoting package, grouped by who is at fault.

- `RemotingProtocolError`: the peer broke the framing or sent a header that cannot be decoded.
  The connection that carried it is closed; nothing else is affected.
- `RemotingCommandError`: a well-framed command whose content is wrong (a missing or ill-typed
  header field, a body that does not parse). The request is answered with SYSTEM_ERROR and a
  remark; the connection stays open.
- `RemotingTimeoutError`, `RemotingConnectError` (and `RemotingConnectTimeoutError`, both at
  once), `RemotingConnectionClosedError`, `RemotingTooManyRequestsError`: what a caller of the
  client sees.
- `CommandEncodeError`: we were asked to send something the wire cannot carry (our bug).
"""

from __future__ import annotations


class RemotingError(Exception):
    """Root of every error the remoting package raises."""


class RemotingProtocolError(RemotingError):
    """The peer broke the remoting framing or header format; closes that connection only."""


class FrameTooLargeError(RemotingProtocolError):
    """A frame's declared length is above `frame_bytes_max` (checked before buffering the body)."""


class FrameLengthError(RemotingProtocolError):
    """A declared length is impossible: below the minimum, or a header longer than its frame."""


class SerializeTypeError(RemotingProtocolError):
    """The serialize-type byte of a frame is neither JSON (0) nor ROCKETMQ (1)."""


class HeaderDecodeError(RemotingProtocolError):
    """A JSON or binary header is malformed (bad UTF-8, wrong types, overrunning lengths)."""


class RemotingCommandError(RemotingError):
    """A well-framed command carries bad content; answered with SYSTEM_ERROR, never a close."""


class HeaderFieldError(RemotingCommandError):
    """A custom-header field is missing or does not parse as its Java type.

    `header` is the header class name, `field` the wire key, `value` the raw text (None when
    missing) and `reason` what was expected, e.g. "is not an int32 (-2147483648..2147483647)".
    The message is what goes into the SYSTEM_ERROR response's remark.
    """

    def __init__(self, header: str, field: str, value: str | None, reason: str) -> None:
        self.header = header
        self.field = field
        self.value = value
        self.reason = reason
        if value is None:
            super().__init__(f"{header}: required field {field} is missing")
        else:
            super().__init__(f"{header}: field {field}={value!r} {reason}")


class BodyDecodeError(RemotingCommandError):
    """A JSON body does not parse, or a value in it has the wrong type; names the JSON path."""


class RemotingTimeoutError(RemotingError):
    """A request got no response within its timeout (or could not be written in time)."""


class RemotingConnectError(RemotingError):
    """A TCP connection to the peer could not be established."""


class RemotingConnectTimeoutError(RemotingConnectError, RemotingTimeoutError):
    """The TCP connection was not established within `connect_timeout_ms`."""


class RemotingConnectionClosedError(RemotingError):
    """The connection closed before a response arrived, or a send was tried on a closed one."""


class RemotingTooManyRequestsError(RemotingError):
    """More invokes are outstanding on one connection than `invokes_in_flight_max` allows."""


class CommandEncodeError(RemotingError):
    """A command cannot be represented on the wire (a value out of its field's range, too large)."""
