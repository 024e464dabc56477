"""Errors of the rocketmq data source.

- `OptionError`: an option (or the written DataFrame's schema) cannot be used; raised when the
  query is planned, naming the option, the value given and what was expected.
- `DataLossError`: messages the query should read are gone and failOnDataLoss is true; names
  the queue and the offsets.
A broker or name server that cannot be reached raises `pyrmq_client`'s errors, naming its
address.
"""

from __future__ import annotations


class OptionError(ValueError):
    """An option of the `rocketmq` data source cannot be used."""

    def __init__(self, option: str, given: object, expected: str) -> None:
        self.option = option
        self.given = given
        self.expected = expected
        super().__init__(f"rocketmq option {option}={given!r}: expected {expected}")


class DataLossError(RuntimeError):
    """Messages a query should read are gone (failOnDataLoss=true); names the queue and offsets."""
