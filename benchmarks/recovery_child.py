"""Child for the recovery benchmark: open a store, append a little more, then SIGKILL itself."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

from store.config import StoreConfig
from store.message_store import MessageStore
from tests.support.store_helpers import message


def main(root: Path, file_size: int) -> None:
    store = MessageStore(StoreConfig(store_path_root_dir=root,
                                     mapped_file_size_commit_log=file_size))
    store.open()
    body = os.urandom(1024)
    for i in range(1000):
        store.append_message(message(body, queue_id=i % 4))
    print("appended", flush=True)
    os.kill(os.getpid(), signal.SIGKILL)


if __name__ == "__main__":
    main(Path(sys.argv[1]), int(sys.argv[2]))
