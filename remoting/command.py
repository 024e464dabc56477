"""`RemotingCommand`: one request or response of the remoting protocol, as decoded from a frame.

A command is a plain value; `remoting.codec` turns it into a frame and back. Requests and
responses are the same type, told apart by bit 0 of `flag`; a response carries its request's
`opaque`, which is how a requester matches responses on a pipelined connection.

Invariants:
- `ext_fields` maps wire keys to text exactly as RocketMQ sends them (numbers in decimal,
  booleans as "true"/"false"); it is shared, never mutated after construction.
- A response built by `make_response` echoes the request's opaque and serialize type, sets the
  response bit and speaks as a Java 5.5.0 server (language JAVA, version PYRMQ_VERSION = 513), as
  Java servers do.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from remoting.codes import (
    ONEWAY_FLAG,
    PYRMQ_VERSION,
    RESPONSE_FLAG,
    LanguageCode,
    ResponseCode,
    SerializeType,
)


@dataclass(frozen=True, slots=True)
class RemotingCommand:
    """One remoting command. `code` is a request code in requests and a response code in
    responses; it stays an `int` because unknown codes must still be carried and answered."""

    code: int
    language: LanguageCode = LanguageCode.JAVA
    version: int = PYRMQ_VERSION
    opaque: int = 0
    flag: int = 0
    remark: str | None = None
    ext_fields: dict[str, str] = field(default_factory=dict)
    body: bytes = b""
    serialize_type: SerializeType = SerializeType.JSON

    @property
    def is_response(self) -> bool:
        """True if flag bit 0 is set: this answers the request with the same opaque."""
        return self.flag & RESPONSE_FLAG == RESPONSE_FLAG

    @property
    def is_oneway(self) -> bool:
        """True if flag bit 1 is set on a request: the requester expects no response."""
        return self.flag & ONEWAY_FLAG == ONEWAY_FLAG

    @classmethod
    def request(
        cls,
        code: int,
        ext_fields: dict[str, str] | None = None,
        body: bytes = b"",
        *,
        serialize_type: SerializeType = SerializeType.JSON,
    ) -> RemotingCommand:
        """A request as pyrmq sends it (language JAVA, version PYRMQ_VERSION). The opaque and the
        oneway bit are set by the connection that sends it."""
        return cls(
            code=code,
            ext_fields={} if ext_fields is None else ext_fields,
            body=body,
            serialize_type=serialize_type,
        )

    def make_response(
        self,
        code: int,
        *,
        remark: str | None = None,
        ext_fields: dict[str, str] | None = None,
        body: bytes = b"",
    ) -> RemotingCommand:
        """The response to this request: same opaque and serialize type, response bit set,
        language JAVA and version PYRMQ_VERSION (what a Java 5.5.0 server answers with)."""
        return RemotingCommand(
            code=code,
            language=LanguageCode.JAVA,
            version=PYRMQ_VERSION,
            opaque=self.opaque,
            flag=RESPONSE_FLAG,
            remark=remark,
            ext_fields={} if ext_fields is None else ext_fields,
            body=body,
            serialize_type=self.serialize_type,
        )


def request_code_not_supported(request: RemotingCommand) -> RemotingCommand:
    """The answer to a request code nobody handles: code 3 with Java's remark text."""
    return request.make_response(
        ResponseCode.REQUEST_CODE_NOT_SUPPORTED,
        remark=f" request type {request.code} not supported",
    )


def system_error(request: RemotingCommand, remark: str) -> RemotingCommand:
    """The answer to a request that failed: code 1 SYSTEM_ERROR with `remark` saying why."""
    return request.make_response(ResponseCode.SYSTEM_ERROR, remark=remark)
