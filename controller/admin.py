"""`pyrmq-admin`: the controller-mode subset of RocketMQ's `mqadmin`, same names and flags.

    pyrmq-admin getControllerMetaData -a CONTROLLER
    pyrmq-admin getSyncStateSet -a CONTROLLER (-b BROKER_NAME | -c CLUSTER -n NAMESRV)
    pyrmq-admin electMaster -a CONTROLLER -b BROKER_ID -bn BROKER_NAME -c CLUSTER
    pyrmq-admin getBrokerEpoch -n NAMESRV (-b BROKER_NAME | -c CLUSTER)
    pyrmq-admin clusterList -n NAMESRV
    pyrmq-admin haStatus (-b BROKER_ADDR | -c CLUSTER -n NAMESRV) [-i SECONDS]

Each prints what mqadmin prints for the same command (the `#Key<TAB>value` lines; clusterList
prints the cluster, broker name, role id and address columns only: pyrmq-admin does not fetch
each broker's runtime statistics; electMaster also prints the `#Broker` member lines, which
mqadmin means to print but never does, as it decodes the response body as a bare
BrokerMemberGroup while controllers send it nested in an ElectMasterResponseBody).

Exit status 0 on success; 1 with one line on stderr naming the command, the address and the
controller's or broker's answer otherwise; 2 for bad usage.
`-a` may list several controllers separated by `;`: as mqadmin does, the first is asked.
`haStatus` asks brokers (GET_BROKER_HA_STATUS), the others controllers or name servers; with
`-i` it repeats every that many seconds until interrupted, as mqadmin does.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections.abc import Callable, Coroutine
from typing import Any, Final

from controller.messages import BrokerReplicasInfo, EpochEntryCache, encode_broker_names
from controller_client.errors import response_error
from controller_client.messages import (
    ElectMasterRequestHeader,
    ElectMasterResponseBody,
    ElectMasterResponseHeader,
    GetMetaDataResponseHeader,
)
from remoting.bodies import ClusterInfo, HARuntimeInfo
from remoting.client import invoke_once, split_host_port
from remoting.codes import RequestCode, ResponseCode
from remoting.command import RemotingCommand
from remoting.errors import BodyDecodeError, RemotingError

TIMEOUT_MS: Final = 5_000
EXIT_OK: Final = 0
EXIT_FAILURE: Final = 1


def _java(value: object) -> str:
    """A value as Java's printf %s shows it (null for a missing one)."""
    return "null" if value is None else str(value)


class AdminError(Exception):
    """A command failed: the message names the request, the address and the answer."""


async def _invoke(addr: str, name: str, request: RemotingCommand) -> RemotingCommand:
    try:
        split_host_port(addr)
    except ValueError:
        raise AdminError(f"{name}: {addr!r} is not host:port") from None
    try:
        response = await invoke_once(addr, request, TIMEOUT_MS)
    except RemotingError as err:
        raise AdminError(f"{name} to {addr}: {err}") from err
    if response.code != ResponseCode.SUCCESS:
        raise AdminError(
            f"{name} to {addr}: {response_error(name, response.code, response.remark)}"
        )
    return response


async def _cluster_info(namesrv: str | None) -> ClusterInfo:
    if not namesrv:
        raise AdminError("the name server address is needed: -n host:port")
    response = await _invoke(
        namesrv.split(";")[0],
        "GET_BROKER_CLUSTER_INFO",
        RemotingCommand.request(RequestCode.GET_BROKER_CLUSTER_INFO),
    )
    return ClusterInfo.decode(response.body)


async def _broker_names(args: argparse.Namespace) -> list[str]:
    if args.brokerName:
        return [args.brokerName.strip()]
    if args.clusterName:
        info = await _cluster_info(args.namesrvAddr)
        return sorted(info.cluster_addr_table.get(args.clusterName.strip(), ()))
    raise AdminError("give -b brokerName or -c clusterName")


async def get_controller_metadata(args: argparse.Namespace) -> None:
    response = await _invoke(
        args.controllerAddress.split(";")[0],
        "CONTROLLER_GET_METADATA_INFO",
        RemotingCommand.request(RequestCode.CONTROLLER_GET_METADATA_INFO),
    )
    header = GetMetaDataResponseHeader.from_ext_fields(response.ext_fields)
    print(f"\n#ControllerGroup\t{_java(header.group)}", end="")
    print(f"\n#ControllerLeaderId\t{_java(header.controller_leader_id)}", end="")
    print(f"\n#ControllerLeaderAddress\t{_java(header.controller_leader_address)}", end="")
    for peer in filter(None, (header.peers or "").split(";")):
        print(f"\n#Peer:\t{peer}", end="")
    print()


async def get_sync_state_set(args: argparse.Namespace) -> None:
    names = await _broker_names(args)
    if not names:
        return
    response = await _invoke(
        args.controllerAddress.split(";")[0],
        "CONTROLLER_GET_SYNC_STATE_DATA",
        RemotingCommand.request(
            RequestCode.CONTROLLER_GET_SYNC_STATE_DATA, body=encode_broker_names(names)
        ),
    )
    table = BrokerReplicasInfo.decode(response.body).replicas_info_table
    for name, info in table.items():
        print(
            f"\n#brokerName\t{name}\n#MasterBrokerId\t{_java(info.master_broker_id)}\n"
            f"#MasterAddr\t{_java(info.master_address)}\n"
            f"#MasterEpoch\t{info.master_epoch}\n#SyncStateSetEpoch\t{info.sync_state_set_epoch}\n"
            f"#SyncStateSetNums\t{len(info.in_sync_replicas)}"
        )
        for label, members in (
            ("InSyncReplica", info.in_sync_replicas),
            ("NotInSyncReplica", info.not_in_sync_replicas),
        ):
            for member in members:
                identity = (
                    f"ReplicaIdentity{{brokerName='{member.broker_name}', "
                    f"brokerId={member.broker_id}, brokerAddress='{member.broker_address}', "
                    f"alive={str(member.alive).lower()}}}"
                )
                print(f"\n {label}:\t{identity}\t{'online' if member.alive else 'offline'}")


async def elect_master(args: argparse.Namespace) -> None:
    header = ElectMasterRequestHeader(
        args.brokerName.strip(),
        int(args.brokerId),
        int(time.time() * 1000),
        cluster_name=args.clusterName.strip(),
        designate_elect=True,
    )
    response = await _invoke(
        args.controllerAddress.split(";")[0],
        "CONTROLLER_ELECT_MASTER",
        RemotingCommand.request(RequestCode.CONTROLLER_ELECT_MASTER, header.to_ext_fields()),
    )
    answer = ElectMasterResponseHeader.from_ext_fields(response.ext_fields)
    body = ElectMasterResponseBody.decode(response.body) if response.body else None
    print(f"\n#ClusterName\t{header.cluster_name}", end="")
    print(f"\n#BrokerName\t{header.broker_name}", end="")
    print(f"\n#BrokerMasterAddr\t{_java(answer.master_address)}", end="")
    print(f"\n#MasterEpoch\t{_java(answer.master_epoch)}", end="")
    print(f"\n#SyncStateSetEpoch\t{_java(answer.sync_state_set_epoch)}")
    group = None if body is None else body.broker_member_group
    if isinstance(group, dict) and isinstance(group.get("brokerAddrs"), dict):
        addrs = group["brokerAddrs"]
        assert isinstance(addrs, dict)
        for broker_id, addr in sorted(addrs.items(), key=lambda item: int(item[0])):
            print(f"\t#Broker\t{int(broker_id)}\t{addr}")


async def get_broker_epoch(args: argparse.Namespace) -> None:
    info = await _cluster_info(args.namesrvAddr)
    for name in await _broker_names(args):
        broker = info.broker_addr_table.get(name)
        if broker is None:
            raise AdminError(f"broker {name} is not registered at {args.namesrvAddr}")
        for role_id, addr in sorted(broker.broker_addrs.items()):
            response = await _invoke(
                addr,
                "GET_BROKER_EPOCH_CACHE",
                RemotingCommand.request(RequestCode.GET_BROKER_EPOCH_CACHE),
            )
            cache = EpochEntryCache.decode(response.body)
            print(
                f"\n#clusterName\t{broker.cluster}\n#brokerName\t{name}\n#brokerAddr\t{addr}\n"
                f"#brokerId\t{role_id}"
            )
            for entry in cache.epoch_list:
                print(
                    f"#Epoch: EpochEntry{{epoch={entry.epoch}, startOffset={entry.start_offset}, "
                    f"endOffset={entry.end_offset}}}"
                )


async def cluster_list(args: argparse.Namespace) -> None:
    info = await _cluster_info(args.namesrvAddr)
    print(f"{'#Cluster Name':<22}  {'#Broker Name':<22}  {'#BID':<4}  {'#Addr':<22}")
    for cluster in sorted(info.cluster_addr_table):
        for name in sorted(info.cluster_addr_table[cluster]):
            broker = info.broker_addr_table.get(name)
            if broker is None:
                continue
            for role_id, addr in sorted(broker.broker_addrs.items()):
                print(f"{cluster:<22}  {name:<22}  {role_id:<4}  {addr:<22}")


def _human_millis(millis: int) -> str:
    """A wall time as mqadmin prints it (UtilAll.timeMillisToHumanString2: local time,
    `yyyy-MM-dd HH:mm:ss,SSS`)."""
    seconds, ms = divmod(millis, 1000)
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(seconds)) + f",{ms:03d}"


def _print_ha_status(addr: str, info: HARuntimeInfo) -> None:
    """One broker's HA status, line for line as mqadmin haStatus prints it."""
    if info.master:
        print(f"\n#MasterAddr\t{addr}\n#MasterCommitLogMaxOffset\t"
              f"{info.master_commit_log_max_offset}\n#SlaveNum\t{len(info.ha_connection_info)}"
              f"\n#InSyncSlaveNum\t{info.in_sync_slave_nums}")
        print(f"{'#SlaveAddr':<32}  {'#SlaveAckOffset':<16} {'#Diff':>16} "
              f"{'#TransferSpeed(KB/s)':>16} {'#Status':>16} {'#TransferFromWhere':>16}")
        for c in info.ha_connection_info:
            status = "OK" if c.in_sync else "Fall Behind"
            print(f"{c.addr:<32}  {c.slave_ack_offset:<16} {c.diff:>16} "
                  f"{c.transferred_byte_in_second / 1024:>16.2f} {status:>16} "
                  f"{c.transfer_from_where:>16}")
        return
    client = info.ha_client_runtime_info
    print(f"\n#MasterAddr\t{_java(client.master_addr)}")
    print(f"#CommitLogMaxOffset\t{client.max_offset}")
    print(f"#TransferSpeed(KB/s)\t{client.transferred_byte_in_second / 1024:.2f}")
    print(f"#LastReadTime\t{_human_millis(client.last_read_timestamp)}")
    print(f"#LastWriteTime\t{_human_millis(client.last_write_timestamp)}")
    print(f"#MasterFlushOffset\t{client.master_flush_offset}")


async def ha_status(args: argparse.Namespace) -> None:
    """GET_BROKER_HA_STATUS of one broker (-b) or of every master of a cluster (-c)."""
    while True:
        if args.brokerAddr:
            addrs = [args.brokerAddr.strip()]
        elif args.clusterName:
            info = await _cluster_info(args.namesrvAddr)
            names = info.cluster_addr_table.get(args.clusterName.strip(), ())
            addrs = sorted(master for name in names
                           if (broker := info.broker_addr_table.get(name)) is not None
                           and (master := broker.broker_addrs.get(0)) is not None)
        else:
            raise AdminError("give -b brokerAddr or -c clusterName")
        for addr in addrs:
            response = await _invoke(addr, "GET_BROKER_HA_STATUS",
                                     RemotingCommand.request(RequestCode.GET_BROKER_HA_STATUS))
            _print_ha_status(addr, HARuntimeInfo.decode(response.body))
        if args.interval is None:
            return
        await asyncio.sleep(args.interval)


_COMMANDS: Final[dict[str, Callable[[argparse.Namespace], Coroutine[Any, Any, None]]]] = {
    "getControllerMetaData": get_controller_metadata,
    "getSyncStateSet": get_sync_state_set,
    "electMaster": elect_master,
    "getBrokerEpoch": get_broker_epoch,
    "clusterList": cluster_list,
    "haStatus": ha_status,
}


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="pyrmq-admin", description="mqadmin's controller-mode commands, for pyrmq"
    )
    commands = parser.add_subparsers(dest="command", required=True)

    def add(name: str, help_text: str) -> argparse.ArgumentParser:
        sub = commands.add_parser(name, help=help_text)
        sub.add_argument("-n", "--namesrvAddr", help="name server address(es), host:port;...")
        return sub

    sub = add("getControllerMetaData", "the controller group, its leader and peers")
    sub.add_argument("-a", "--controllerAddress", required=True)
    sub = add("getSyncStateSet", "a broker set's master, epochs and SyncStateSet")
    sub.add_argument("-a", "--controllerAddress", required=True)
    sub.add_argument("-b", "--brokerName")
    sub.add_argument("-c", "--clusterName")
    sub = add("electMaster", "re-elect the given broker as master")
    sub.add_argument("-a", "--controllerAddress", required=True)
    sub.add_argument("-b", "--brokerId", required=True, type=int)
    sub.add_argument("-bn", "--brokerName", required=True)
    sub.add_argument("-c", "--clusterName", required=True)
    sub = add("getBrokerEpoch", "each broker's epoch entries")
    sub.add_argument("-b", "--brokerName")
    sub.add_argument("-c", "--clusterName")
    add("clusterList", "the brokers registered at the name server")
    sub = add("haStatus", "a broker's HA runtime status (its slaves, or its master)")
    sub.add_argument("-b", "--brokerAddr")
    sub.add_argument("-c", "--clusterName")
    sub.add_argument("-i", "--interval", type=int, help="repeat every that many seconds")
    return parser


def main(argv: list[str] | None = None) -> int:
    """The `pyrmq-admin` command; returns the exit status."""
    args = _parser().parse_args(argv)
    try:
        asyncio.run(_COMMANDS[args.command](args))
    except KeyboardInterrupt:  # haStatus -i runs until interrupted
        return EXIT_OK
    except AdminError as err:
        print(f"pyrmq-admin {args.command}: {err}", file=sys.stderr)
        return EXIT_FAILURE
    except BodyDecodeError as err:  # an answer that is not the body the request asked for
        print(f"pyrmq-admin {args.command}: the answer's body does not decode: {err}",
              file=sys.stderr)
        return EXIT_FAILURE
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
