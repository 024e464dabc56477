"""`pyrmq-controller -c controller.conf [-p | -m]`: the embedded name server and controller.

- `-c FILE`: the configuration (`controller.conf`, RocketMQ properties; see `controller.config`).
  Without it every key has its default.
- `-p`: print every configuration item as `key=value` and exit 0; `-m`: print only the important
  ones (`listenPort`, `controllerStorePath`) and exit 0. Both apply `-c` first, like the broker's.

Runs on uvloop until SIGTERM or SIGINT, which stop it gracefully (requests in flight are
answered, connections closed) with exit status 0. A bad configuration exits with status 1 and one
line naming the file, the line and the value; an address that cannot be bound, or a damaged
controller event log (other than a torn last record), exits with 1 too.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
from pathlib import Path

import uvloop

from controller.config import ControllerConfig, parse_controller_config
from controller.errors import ConfigError, ControllerError
from controller.server import ControllerServer
from remoting.log_writer import process_log

log = logging.getLogger("controller")

EXIT_OK = 0
EXIT_FAILURE = 1


def _load(path: Path | None) -> tuple[ControllerConfig, list[str]]:
    home = str(Path.home())
    if path is None:
        return parse_controller_config("", source="(defaults)", home=home)
    try:
        text = path.read_text(encoding="latin-1")  # Properties.load(InputStream) reads ISO 8859-1
    except OSError as err:
        raise ConfigError(f"{path}: cannot read: {err.strerror}") from err
    return parse_controller_config(text, source=str(path), home=home)


async def _serve(config: ControllerConfig) -> None:
    server = ControllerServer(config)
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, server.stop)
    await server.run()
    log.info("pyrmq-controller stopped")


def main(argv: list[str] | None = None) -> int:
    """The `pyrmq-controller` command; returns the process exit status."""
    parser = argparse.ArgumentParser(
        prog="pyrmq-controller", description="pyrmq embedded name server and controller"
    )
    parser.add_argument("-c", "--configFile", type=Path, help="controller.conf (properties)")
    prints = parser.add_mutually_exclusive_group()
    prints.add_argument(
        "-p", "--printConfigItem", action="store_true", help="print all config items and exit"
    )
    prints.add_argument(
        "-m",
        "--printImportantConfig",
        action="store_true",
        help="print important config items and exit",
    )
    args = parser.parse_args(argv)
    with process_log(logging.INFO):
        return _run(args)


def _run(args: argparse.Namespace) -> int:
    try:
        config, warnings = _load(args.configFile)
    except ConfigError as err:
        print(f"pyrmq-controller: {err}", file=sys.stderr)
        return EXIT_FAILURE
    for warning in warnings:
        log.warning("%s", warning)
    if args.printConfigItem or args.printImportantConfig:
        for key, value in config.properties(important_only=args.printImportantConfig):
            print(f"{key}={value}")
        return EXIT_OK
    try:
        uvloop.run(_serve(config))
    except OSError as err:
        log.error("cannot serve on %s:%d: %s", config.bind_address, config.listen_port, err)  # noqa: TRY400
        return EXIT_FAILURE
    except ControllerError as err:  # the event log cannot be trusted: refuse to start
        log.error("cannot start the controller: %s", err)  # noqa: TRY400
        return EXIT_FAILURE
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
