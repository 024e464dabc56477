"""`controller.conf` parsing: Java properties syntax, typed keys, errors naming the line."""

from __future__ import annotations

import pytest

from controller.config import ControllerConfig, parse_controller_config
from controller.errors import ConfigError


def test_malformed_unicode_escape_names_the_file_and_line() -> None:
    with pytest.raises(ConfigError, match=r"^f:2: value of b: malformed \\uxxxx escape \\u12G4$"):
        parse_controller_config("a=1\nb=\\u12G4", source="f", home="/h")


def test_every_key_and_its_default() -> None:
    config, warnings = parse_controller_config(
        "listenPort=19876\nbindAddress = 127.0.0.1\ncontrollerStorePath=/data/ctl\n"
        "scanNotActiveBrokerInterval=1000\nbrokerChannelExpiredTime=30000\n"
        "serverChannelMaxIdleTimeSeconds=60\nserverSocketBacklog=2048\n",
        source="controller.conf",
        home="/home/u",
    )
    assert config == ControllerConfig(
        listen_port=19876,
        bind_address="127.0.0.1",
        controller_store_path="/data/ctl",
        scan_not_active_broker_interval_ms=1000,
        broker_channel_expired_time_ms=30_000,
        server_channel_max_idle_time_seconds=60,
        server_socket_backlog=2048,
    )
    assert warnings == []
    defaults, _ = parse_controller_config("", source="-", home="/home/u/")
    assert defaults == ControllerConfig(controller_store_path="/home/u/DLedgerController")
    assert (defaults.listen_port, defaults.broker_channel_expired_time_ms) == (9876, 120_000)


def test_unknown_keys_are_warnings_with_their_line() -> None:
    config, warnings = parse_controller_config(
        "controllerDLegerGroup=group1\nlistenPort=9877\nenableElectUncleanMaster=true\n"
        "isProcessReadEvent=false\n",
        source="controller.conf",
        home="/h",
    )
    assert config.listen_port == 9877
    assert config.enable_elect_unclean_master
    assert warnings == [
        "controller.conf:1: unknown key controllerDLegerGroup ignored",
        "controller.conf:4: unknown key isProcessReadEvent ignored",
    ]


def test_last_duplicate_wins() -> None:
    config, _ = parse_controller_config("listenPort=1\nlistenPort=2", source="-", home="/h")
    assert config.listen_port == 2


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param("listenPort=98x76", "c.conf:1: listenPort='98x76' is not an int", id="nan"),
        pytest.param(
            "\nlistenPort=70000", "c.conf:2: listenPort='70000' is outside 0..65535", id="range"
        ),
        pytest.param(
            "scanNotActiveBrokerInterval=0",
            "c.conf:1: scanNotActiveBrokerInterval='0' is outside 1..2147483647",
            id="zero-interval",
        ),
        pytest.param(
            "brokerChannelExpiredTime=99999999999",
            "c.conf:1: brokerChannelExpiredTime='99999999999' is not an int",
            id="beyond-int",
        ),
        pytest.param(
            "controllerStorePath=  ", "c.conf:1: controllerStorePath is empty", id="empty"
        ),
        pytest.param(
            "enableControllerInNamesrv=yes",
            "c.conf:1: enableControllerInNamesrv='yes' is not true or false",
            id="bool",
        ),
    ],
)
def test_bad_values_name_the_file_line_key_and_value(text: str, message: str) -> None:
    with pytest.raises(ConfigError) as raised:
        parse_controller_config(text, source="c.conf", home="/h")
    assert str(raised.value) == message


def test_print_lists() -> None:
    config = ControllerConfig(controller_store_path="/s")
    assert config.properties() == [
        ("listenPort", "9876"),
        ("bindAddress", "0.0.0.0"),
        ("controllerStorePath", "/s"),
        ("scanNotActiveBrokerInterval", "5000"),
        ("brokerChannelExpiredTime", "120000"),
        ("serverChannelMaxIdleTimeSeconds", "120"),
        ("serverSocketBacklog", "1024"),
        ("enableControllerInNamesrv", "true"),
        ("controllerListenPort", ""),
        ("scanInactiveMasterInterval", "5000"),
        ("inactiveMasterScanDelay", "10000"),
        ("electMasterMaxRetryCount", "3"),
        ("enableElectUncleanMaster", "false"),
        ("notifyBrokerRoleChanged", "true"),
        ("pyrmqAdminAllowlist", ""),
    ]
    assert config.properties(important_only=True) == [
        ("listenPort", "9876"),
        ("controllerStorePath", "/s"),
        ("enableControllerInNamesrv", "true"),
        ("controllerListenPort", ""),
    ]
