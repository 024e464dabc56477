"""Errors of the controller client: one typed error per controller response code
(docs/remoting-protocol.md §12).

- `ControllerError`: root of everything this package raises.
- `ControllerResponseError`: the controller answered with a non-zero code; `code` and `remark`
  are the response's. Each controller code 2000-2016 has its own subclass, so a caller catches
  exactly the refusal it can handle (`ControllerNotLeaderError` -> rediscover the leader,
  `ControllerBrokerIdInvalidError` -> ask for the next id again, ...). `response_error()` maps a
  code to its class; a code without one gives a plain `ControllerResponseError`.
- `ControllerUnavailableError`: no controller in `controllerAddr` answered, or none knows a leader.
- `ControllerAddressLookupError`: a DNS-looked-up `controllerAddr` is malformed or does not resolve.
"""

from __future__ import annotations

from typing import ClassVar, Final

from remoting.codes import ResponseCode


class ControllerError(Exception):
    """Root of every error the controller client raises."""


class ControllerUnavailableError(ControllerError):
    """No controller answered, or none of them knows a leader, before the deadline."""


class ControllerAddressLookupError(ControllerError):
    """`controllerAddr` with `fetchControllerAddrByDnsLookup=true` is not one `domain:port`, or
    the domain does not resolve to any IPv4 address."""


class ControllerResponseError(ControllerError):
    """The controller answered a request with a non-zero response code."""

    code_expected: ClassVar[int | None] = None

    def __init__(self, request: str, code: int, remark: str | None) -> None:
        self.request = request
        self.code = code
        self.remark = remark
        try:
            name = ResponseCode(code).name
        except ValueError:
            name = "UNKNOWN"
        super().__init__(f"{request}: controller answered {code} {name}: {remark or '(no remark)'}")


class ControllerFencedMasterEpochError(ControllerResponseError):
    code_expected = ResponseCode.CONTROLLER_FENCED_MASTER_EPOCH


class ControllerFencedSyncStateSetEpochError(ControllerResponseError):
    code_expected = ResponseCode.CONTROLLER_FENCED_SYNC_STATE_SET_EPOCH


class ControllerInvalidMasterError(ControllerResponseError):
    code_expected = ResponseCode.CONTROLLER_INVALID_MASTER


class ControllerInvalidReplicasError(ControllerResponseError):
    code_expected = ResponseCode.CONTROLLER_INVALID_REPLICAS


class ControllerMasterNotAvailableError(ControllerResponseError):
    code_expected = ResponseCode.CONTROLLER_MASTER_NOT_AVAILABLE


class ControllerInvalidRequestError(ControllerResponseError):
    code_expected = ResponseCode.CONTROLLER_INVALID_REQUEST


class ControllerBrokerNotAliveError(ControllerResponseError):
    code_expected = ResponseCode.CONTROLLER_BROKER_NOT_ALIVE


class ControllerNotLeaderError(ControllerResponseError):
    code_expected = ResponseCode.CONTROLLER_NOT_LEADER


class ControllerBrokerMetadataNotExistError(ControllerResponseError):
    code_expected = ResponseCode.CONTROLLER_BROKER_METADATA_NOT_EXIST


class ControllerInvalidCleanBrokerMetadataError(ControllerResponseError):
    code_expected = ResponseCode.CONTROLLER_INVALID_CLEAN_BROKER_METADATA


class ControllerBrokerNeedToBeRegisteredError(ControllerResponseError):
    code_expected = ResponseCode.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED


class ControllerMasterStillExistError(ControllerResponseError):
    code_expected = ResponseCode.CONTROLLER_MASTER_STILL_EXIST


class ControllerElectMasterFailedError(ControllerResponseError):
    code_expected = ResponseCode.CONTROLLER_ELECT_MASTER_FAILED


class ControllerAlterSyncStateSetFailedError(ControllerResponseError):
    code_expected = ResponseCode.CONTROLLER_ALTER_SYNC_STATE_SET_FAILED


class ControllerBrokerIdInvalidError(ControllerResponseError):
    code_expected = ResponseCode.CONTROLLER_BROKER_ID_INVALID


class ControllerJRaftInternalError(ControllerResponseError):
    code_expected = ResponseCode.CONTROLLER_JRAFT_INTERNAL_ERROR


class ControllerBrokerLiveInfoNotExistsError(ControllerResponseError):
    code_expected = ResponseCode.CONTROLLER_BROKER_LIVE_INFO_NOT_EXISTS


_BY_CODE: Final[dict[int, type[ControllerResponseError]]] = {
    int(cls.code_expected): cls
    for cls in ControllerResponseError.__subclasses__()
    if cls.code_expected is not None
}


def response_error(request: str, code: int, remark: str | None) -> ControllerResponseError:
    """The typed error for a non-zero controller response `code` to `request`."""
    return _BY_CODE.get(code, ControllerResponseError)(request, code, remark)
