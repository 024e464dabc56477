"""Errors of pyrmq's client, grouped by what the caller can conclude.

- `BrokerClientError`: a broker answered a request with an error code; `code` and `remark`
  say which.
- `RouteError`: no name server gave a usable route (unreachable, or the topic has no queue /
  no master for the broker name asked about). Names the name servers and the topic.
- `RetriesExhaustedError`: every attempt of a retried request failed; names the addresses tried
  and the last error (its `__cause__`). For a send, only answers that say nothing was stored
  (and connect failures) are retried, so this error means the message was not stored.
- A send whose outcome is unknown (a timeout, or the connection closing after the request was
  written) raises the remoting error as is and is never retried: the message may be stored.
"""

from __future__ import annotations

__all__ = ["BrokerClientError", "ClientError", "RetriesExhaustedError", "RouteError"]


class ClientError(Exception):
    """Root of every error pyrmq_client raises itself."""


class BrokerClientError(ClientError):
    """The broker answered a request with a non-success code.

    `code` is the response code, `remark` the broker's remark (may be None).
    """

    def __init__(self, what: str, code: int, remark: str | None) -> None:
        self.code = code
        self.remark = remark
        super().__init__(f"{what}: code={code} remark={remark!r}")


class RouteError(ClientError):
    """No usable route: the name servers could not be reached, or do not route the topic."""


class RetriesExhaustedError(ClientError):
    """Every attempt failed; `attempts` lists "address: error" for each one (the message names
    the first and last SHOWN of them)."""

    SHOWN = 3

    def __init__(self, what: str, attempts: list[str]) -> None:
        self.attempts = attempts
        shown = attempts
        if len(attempts) > 2 * self.SHOWN:
            shown = [*attempts[:self.SHOWN], f"({len(attempts) - 2 * self.SHOWN} more)",
                     *attempts[-self.SHOWN:]]
        super().__init__(f"{what}: {len(attempts)} attempts failed: " + "; ".join(shown))
