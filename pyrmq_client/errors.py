"""Errors of pyrmq's client, grouped by what the caller can conclude.

- `BrokerClientError` (defined with the broker's errors, re-exported here): a broker answered a
  request with an error code; `code` and `remark` say which.
- `RouteError`: no name server gave a usable route (unreachable, or the topic has no queue /
  no master for the broker name asked about). Names the name servers and the topic.
- `RetriesExhaustedError`: every attempt of a retried request failed; names the addresses tried
  and the last error (its `__cause__`). For a send, only answers that say nothing was stored
  (and connect failures) are retried, so this error means the message was not stored.
- A send whose outcome is unknown (a timeout, or the connection closing after the request was
  written) raises the remoting error as is and is never retried: the message may be stored.
"""

from __future__ import annotations

from broker.errors import BrokerClientError

__all__ = ["BrokerClientError", "ClientError", "RetriesExhaustedError", "RouteError"]


class ClientError(Exception):
    """Root of the errors pyrmq_client raises itself (broker answers are `BrokerClientError`)."""


class RouteError(ClientError):
    """No usable route: the name servers could not be reached, or do not route the topic."""


class RetriesExhaustedError(ClientError):
    """Every attempt failed; `attempts` lists "address: error" for each one."""

    def __init__(self, what: str, attempts: list[str]) -> None:
        self.attempts = attempts
        super().__init__(f"{what}: {len(attempts)} attempts failed: " + "; ".join(attempts))
