"""`pyrmq-broker -c broker.conf [-n namesrv] [-p | -m]`: run one broker node.

Options as Java's `mqbroker`: `-c` the properties file, `-n` the name servers (`;`-separated,
overrides `namesrvAddr`), `-p` print every config item and exit, `-m` print the important ones
and exit. Exit status: 0 after a clean stop (SIGTERM or SIGINT), 2 for a bad command line or
config file (the message names the key and the line), 1 for a failure while running.
Runs on uvloop (installed only here: STYLE §5).
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

import uvloop

from broker.config import LoadedConfig, config_from_properties, config_items, load_broker_config
from broker.errors import BrokerError
from broker.heap import keep_freed_memory
from broker.node import BrokerNode
from remoting.log_writer import process_log
from store import testhooks

log = logging.getLogger("broker")

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="pyrmq-broker", description=__doc__.splitlines()[0])
    parser.add_argument("-c", "--configFile", dest="config_file", type=Path,
                        help="broker config file (Java properties format)")
    parser.add_argument("-n", "--namesrvAddr", dest="namesrv_addr",
                        help="name server addresses, e.g. 192.168.0.1:9876;192.168.0.2:9876")
    group = parser.add_mutually_exclusive_group()
    group.add_argument("-p", "--printConfigItem", dest="print_all", action="store_true",
                       help="print all config items and exit")
    group.add_argument("-m", "--printImportantConfig", dest="print_important",
                       action="store_true", help="print important config items and exit")
    parser.add_argument("--log-level", default="INFO", help="logging level (default INFO)")
    parser.add_argument("--test-hooks", action="store_true",
                        help="fault-injection tests only: turn on the store's fault points and "
                             "durability journal from PYRMQ_FAULTPOINTS / PYRMQ_DURABILITY_FD "
                             "(ignored without this option)")
    return parser


def load(args: argparse.Namespace) -> LoadedConfig:
    """The config of the command line: the file (if any), then `-n` over it."""
    overrides = {"namesrvAddr": args.namesrv_addr} if args.namesrv_addr else None
    if args.config_file is None:
        return config_from_properties([], path="(defaults)", overrides=overrides)
    return load_broker_config(args.config_file, overrides=overrides)


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    with process_log(args.log_level.upper()):
        return _run(args)


def _run(args: argparse.Namespace) -> int:
    try:
        loaded = load(args)
        if args.test_hooks:
            testhooks.enable_from_environment()
            log.warning("store test hooks on (--test-hooks): fault points may kill this broker")
    except (BrokerError, ValueError) as err:
        print(f"pyrmq-broker: {err}", file=sys.stderr)
        return EXIT_USAGE
    for warning in loaded.warnings:
        log.warning("%s", warning)
    if args.print_all or args.print_important:
        for key, value in config_items(loaded.config, important_only=args.print_important):
            print(f"{key}={value}")
        return EXIT_OK
    keep_freed_memory()  # process-wide, so here and not in BrokerNode (see broker/heap.py)
    try:
        node = BrokerNode(loaded.config, handle_signals=True, freeze_heap=True)
    except BrokerError as err:
        print(f"pyrmq-broker: {err}", file=sys.stderr)
        return EXIT_USAGE
    try:
        uvloop.run(node.run())
    except BrokerError as err:
        log.error("broker failed error=%s", err)  # noqa: TRY400 - the message is the report
        return EXIT_FAILED
    except Exception:
        log.exception("broker failed")
        return EXIT_FAILED
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
