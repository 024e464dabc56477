"""Child process for test_disk_full: fill a small tmpfs through the store, then free space.

Prints one line per phase; exits 0 only if every check held. A SIGBUS would kill it with
signal 7, which the parent test reports.
"""

from __future__ import annotations

import sys
from pathlib import Path

from store.errors import DiskFullError
from store.message_store import MessageStore
from tests.support.store_helpers import message, read_all, small_config


def main(root: Path, ballast: Path) -> int:
    config = small_config(root, mapped_file_size_commit_log=128 * 1024,
                          disk_space_warning_level_ratio=101)
    store = MessageStore(config)
    store.open()
    appended: list[bytes] = []
    refusal = None
    for i in range(10_000):
        body = f"{i:08d}".encode() * 128
        max_before = store.max_phy_offset
        try:
            store.append_message(message(body, queue_id=i % 2))
        except DiskFullError as err:
            refusal = err
            assert store.max_phy_offset == max_before, "a refused append moved the log"
            break
        appended.append(body)
    assert refusal is not None, "the tmpfs never filled"
    print(f"refused after {len(appended)} appends: {refusal}", flush=True)
    # Reads keep working while writes are refused.
    got = [r.body for q in (0, 1) for r in read_all(store, "TopicTest", q)]
    assert sorted(got) == sorted(appended), "reads changed after the refusal"
    print("reads ok", flush=True)
    # A second attempt is refused the same way (no half-made file left behind).
    try:
        store.append_message(message(b"y" * 1024))
    except DiskFullError:
        print("still refused", flush=True)
    else:
        # The last file had room for this smaller record: also fine, count it.
        appended.append(b"y" * 1024)
    ballast.unlink()
    for i in range(300):
        store.append_message(message(f"after{i}".encode() * 100, queue_id=i % 2))
    print("writes resumed", flush=True)
    store.close()
    reopened = MessageStore(config)
    reopened.open()
    total = sum(len(read_all(reopened, "TopicTest", q)) for q in (0, 1))
    assert total == len(appended) + 300, (total, len(appended))
    reopened.close()
    print("reopen ok", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]), Path(sys.argv[2])))
