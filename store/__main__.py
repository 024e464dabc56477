"""`pyrmq-store-demo`: write, crash-recover and read back a store, printing what happens.

Until the broker lands this is README command (1): it shows the store on real files.
"""

from __future__ import annotations

import argparse
import logging
import multiprocessing
import os
import shutil
import signal
import sys
import time
from pathlib import Path

from store.config import StoreConfig
from store.host_port import HostPort
from store.message_encoder import prepare_message
from store.message_properties import encode_properties
from store.message_store import MessageStore

HOST = HostPort.from_str("127.0.0.1:10911")


def _config(root: Path) -> StoreConfig:
    return StoreConfig(store_path_root_dir=root, mapped_file_size_commit_log=64 * 1024 * 1024)


def _append(root: Path, count: int) -> None:
    store = MessageStore(_config(root))
    store.open()
    started = time.perf_counter()
    for i in range(count):
        store.append_message(prepare_message(
            topic="DemoTopic", queue_id=i % 4, flag=0, body=b"message %08d " % i + b"." * 1000,
            properties=encode_properties({"TAGS": "TagA" if i % 2 else "TagB"}), sys_flag=0,
            born_timestamp=int(time.time() * 1000), born_host=HOST, store_host=HOST,
            max_message_size=4 * 1024 * 1024,
        ))
    elapsed = time.perf_counter() - started
    print(f"appended {count:,} x 1 KiB messages in {elapsed:.2f} s "
          f"({count / elapsed:,.0f} msg/s); max_phy_offset={store.max_phy_offset:,}", flush=True)
    # Die like a killed process: no flush, no checkpoint, abort file left behind.
    os.kill(os.getpid(), signal.SIGKILL)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="pyrmq-store-demo", description=__doc__)
    parser.add_argument("--dir", type=Path, default=Path("store-demo"),
                        help="store directory (deleted first)")
    parser.add_argument("--messages", type=int, default=200_000)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s %(message)s")
    shutil.rmtree(args.dir, ignore_errors=True)
    print(f"writing to {args.dir.resolve()} in a child process, then SIGKILL", flush=True)
    child = multiprocessing.get_context("spawn").Process(
        target=_append, args=(args.dir, args.messages)
    )
    child.start()
    child.join()
    print(f"child exited with {child.exitcode} (SIGKILL is -9)")
    store = MessageStore(_config(args.dir))
    report = store.open()
    print(f"recovered: abnormal={report.abnormal} records_scanned={report.records_scanned:,} "
          f"max_phy_offset={report.max_phy_offset:,} lost_committed={report.lost_committed} "
          f"in {report.elapsed_s:.2f} s")
    total = 0
    for queue_id in range(4):
        count = store.max_offset_in_queue("DemoTopic", queue_id)
        total += count
        first = store.get_messages("DemoTopic", queue_id, 0, max_count=1)
        print(f"  DemoTopic/{queue_id}: {count:,} messages, first body starts "
              f"{first.messages[0][88:104]!r}" if first.messages else f"  queue {queue_id}: empty")
    print(f"all {total:,} messages readable after the crash" if total == args.messages else
          f"MISMATCH: {total:,} readable, {args.messages:,} appended")
    store.close()
    return 0 if total == args.messages else 1


if __name__ == "__main__":
    sys.exit(main())
