"""A record's transaction type (SYSFLAG bits 2-3) and the one rule that follows from it.

Only TRANSACTION_NOT and TRANSACTION_COMMIT records take a place in their queue: a queue offset
from the queue's counter and a consume-queue unit. PREPARED and ROLLBACK records are stored with
queue offset 0, leave the counter where it is and get no unit (Java: `assignOffset`,
`increaseOffset` and `CommitLogDispatcherBuildConsumeQueue` all switch on this type).

The append path, live dispatch, recovery's re-dispatch and the rebuild of the queue counters
all ask `takes_queue_offset` (or its array twin for recovery's vectorised scan), so that a
record that takes no offset can never leave a gap in its queue (issue 12).
"""

from __future__ import annotations

from typing import Final

import numpy as np
import numpy.typing as npt

TRANSACTION_TYPE_MASK: Final = 0xC
TRANSACTION_NOT_TYPE: Final = 0x0
TRANSACTION_PREPARED_TYPE: Final = 0x4
TRANSACTION_COMMIT_TYPE: Final = 0x8
TRANSACTION_ROLLBACK_TYPE: Final = 0xC


def takes_queue_offset(sys_flag: int) -> bool:
    """True if a record with this SYSFLAG takes a queue offset and a consume-queue unit."""
    return (sys_flag & TRANSACTION_TYPE_MASK) in (TRANSACTION_NOT_TYPE, TRANSACTION_COMMIT_TYPE)


def takes_queue_offset_array(sys_flags: npt.NDArray[np.integer]) -> npt.NDArray[np.bool_]:
    """`takes_queue_offset` for each element."""
    kind = sys_flags & TRANSACTION_TYPE_MASK
    takes: npt.NDArray[np.bool_] = (kind == TRANSACTION_NOT_TYPE) | (
        kind == TRANSACTION_COMMIT_TYPE)
    return takes


def batch_transaction_error(sys_flag: int) -> str | None:
    """Why a batch with this SYSFLAG is refused, None if it is not: a batch must be of
    TRANSACTION_NOT type (Java's `asyncPutMessages` answers MESSAGE_ILLEGAL to the others,
    COMMIT included)."""
    kind = sys_flag & TRANSACTION_TYPE_MASK
    if kind == TRANSACTION_NOT_TYPE:
        return None
    return f"batch message does not support transaction (sysFlag={sys_flag:#x})"
