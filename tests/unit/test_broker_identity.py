"""`brokerIdentity` / `brokerIdentity-temp`: exact bytes out, Java-tolerant reading in."""

from __future__ import annotations

from pathlib import Path

import pytest

from store.broker_identity import (
    BROKER_IDENTITY_FILE_NAME,
    BrokerIdentity,
    TempBrokerIdentity,
    decode_broker_identity,
    decode_temp_broker_identity,
    delete_temp_broker_identity,
    load_broker_identity,
    load_temp_broker_identity,
    temp_path_of,
    write_broker_identity,
    write_temp_broker_identity,
)

# docs/store-format.md §6 example files.
GOLDEN = BrokerIdentity("DefaultCluster", "broker-a", 1)
GOLDEN_BYTES = b"DefaultCluster#broker-a#1"
GOLDEN_TEMP = TempBrokerIdentity(
    "DefaultCluster", "broker-a", 2, "192.168.0.11:10911;1700000000123"
)
GOLDEN_TEMP_BYTES = b"DefaultCluster#broker-a#2#192.168.0.11:10911;1700000000123"


def test_golden_bytes() -> None:
    assert GOLDEN.encode() == GOLDEN_BYTES
    assert GOLDEN_TEMP.encode() == GOLDEN_TEMP_BYTES
    assert decode_broker_identity(GOLDEN_BYTES) == GOLDEN
    assert decode_temp_broker_identity(GOLDEN_TEMP_BYTES) == GOLDEN_TEMP


def test_write_produces_exact_bytes_and_loads_back(tmp_path: Path) -> None:
    path = tmp_path / BROKER_IDENTITY_FILE_NAME
    write_broker_identity(path, GOLDEN)
    assert path.read_bytes() == GOLDEN_BYTES
    assert load_broker_identity(path) == GOLDEN
    assert sorted(p.name for p in tmp_path.iterdir()) == [BROKER_IDENTITY_FILE_NAME]


def test_temp_file_lifecycle(tmp_path: Path) -> None:
    temp = temp_path_of(tmp_path / BROKER_IDENTITY_FILE_NAME)
    assert temp.name == "brokerIdentity-temp"
    write_temp_broker_identity(temp, GOLDEN_TEMP)
    assert temp.read_bytes() == GOLDEN_TEMP_BYTES
    assert load_temp_broker_identity(temp) == GOLDEN_TEMP
    delete_temp_broker_identity(temp)
    assert not temp.exists()
    delete_temp_broker_identity(temp)  # absent is fine
    assert load_temp_broker_identity(temp) is None


def test_absent_files_load_as_none(tmp_path: Path) -> None:
    assert load_broker_identity(tmp_path / BROKER_IDENTITY_FILE_NAME) is None
    assert load_temp_broker_identity(tmp_path / "brokerIdentity-temp") is None


@pytest.mark.parametrize(
    "content",
    [
        pytest.param(b"DefaultCluster#broker-a#1\n", id="newline"),
        pytest.param(b"DefaultCluster#broker-a#1\r\n", id="crlf"),
        pytest.param(b"DefaultCluster#broker-a#1  \t", id="spaces"),
        pytest.param(b"DefaultCluster#broker-a#1#", id="trailing-separator"),
        pytest.param(b"DefaultCluster#broker-a#1#extra", id="extra-part-ignored-as-java"),
        pytest.param(b"DefaultCluster#broker-a#+1", id="java-long-sign"),
    ],
)
def test_tolerant_read(content: bytes) -> None:
    assert decode_broker_identity(content) == GOLDEN


@pytest.mark.parametrize(
    "content",
    [
        pytest.param(b"", id="empty"),
        pytest.param(b"DefaultCluster#broker-a", id="no-id"),
        pytest.param(b"#broker-a#1", id="empty-cluster"),
        pytest.param(b"DefaultCluster##1", id="empty-broker"),
        pytest.param(b"DefaultCluster#broker-a#x", id="id-not-a-number"),
        pytest.param(b"DefaultCluster#broker-a#", id="id-empty"),
        pytest.param(b"DefaultCluster#broker-a#99999999999999999999", id="id-beyond-long"),
        pytest.param(b"\xffCluster#broker-a#1", id="bad-utf8"),
    ],
)
def test_not_loaded(content: bytes) -> None:
    assert decode_broker_identity(content) is None


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        pytest.param(GOLDEN_TEMP_BYTES + b"\n", GOLDEN_TEMP, id="newline-stripped"),
        pytest.param(b"DefaultCluster#broker-a#2", None, id="no-check-code"),
        pytest.param(b"DefaultCluster#broker-a#2#", None, id="empty-check-code"),
        pytest.param(b"DefaultCluster#broker-a#2# \n", None, id="blank-check-code"),
        pytest.param(b"DefaultCluster#broker-a#x#code", None, id="bad-id"),
    ],
)
def test_temp_decoding(content: bytes, expected: TempBrokerIdentity | None) -> None:
    assert decode_temp_broker_identity(content) == expected


def test_load_logs_a_file_that_is_not_loaded(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / BROKER_IDENTITY_FILE_NAME
    path.write_bytes(b"DefaultCluster#broker-a")
    assert load_broker_identity(path) is None
    assert "not loaded" in caplog.text
    assert str(path) in caplog.text


@pytest.mark.parametrize(
    ("identity", "field"),
    [
        pytest.param(BrokerIdentity("a#b", "broker-a", 1), "cluster_name", id="hash-in-name"),
        pytest.param(BrokerIdentity("", "broker-a", 1), "cluster_name", id="empty-cluster"),
        pytest.param(BrokerIdentity("c", "broker-a ", 1), "broker_name", id="trailing-space"),
        pytest.param(BrokerIdentity("c", "broker-a", 0), "broker_id", id="id-zero"),
        pytest.param(TempBrokerIdentity("c", "b", 1, "x\n"), "register_check_code", id="newline"),
    ],
)
def test_encode_refuses_what_the_format_cannot_hold(
    identity: BrokerIdentity | TempBrokerIdentity, field: str
) -> None:
    with pytest.raises(ValueError, match=field):
        identity.encode()
