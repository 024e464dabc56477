"""Helpers for the controller tests: registrations drawn as one-line steps, tables drawn as text.

A step is one call on a `RouteInfoManager`:

    reg A broker-a#0 T:4 X:8/2 dv=1 sv=0 at=0 ch=1 ha=A:10912 timeout=500
        REGISTER_BROKER from address A (`10.0.0.A:10911` unless it has a colon) as id 0 of
        broker set broker-a, with topics T (4 queues) and X (8 read, 2 write queues), data
        version counter 1, stateVersion 0, at now_ms 0, on channel 1 (default: one channel per
        address), HA address `A:10912` (default: the address with port 10912), heartbeat
        timeout 500 ms (default: none sent). `acting` sends enableActingMaster=true, `old`
        sends no enableActingMaster at all (a pre-5.0 broker), `cluster=C` another cluster,
        `zone=Z` the `__ZONE_NAME` extField.
    unreg A broker-a#0           UNREGISTER_BROKER
    scan at=130000               scan_not_active_broker(now_ms=130000)
    close ch=1                   on_channel_destroy(1)

`tables(manager)` draws every broker set and every topic's queues, sorted:

    broker-a{0:A 1:B} broker-b{0:C} | T[broker-a=4rw broker-b=8rw] X[broker-a=8r-]

(perm letters: r = PERM_READ, w = PERM_WRITE). Addresses are drawn as their step name.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from controller.route_info import RegisterBrokerResult, RemovedBroker, RouteInfoManager
from remoting.bodies import (
    PERM_READ,
    PERM_WRITE,
    DataVersion,
    TopicConfig,
    TopicConfigAndMappingSerializeWrapper,
)
from remoting.headers import RegisterBrokerRequestHeader

CLUSTER = "DefaultCluster"


def addr(name: str) -> str:
    """The remoting address a step calls `name`: `A` is `10.0.0.A:10911`."""
    return name if ":" in name else f"10.0.0.{name}:10911"


def name_of(address: str) -> str:
    """The step name of an address made by `addr`."""
    if address.startswith("10.0.0.") and address.endswith(":10911"):
        return address[len("10.0.0.") : -len(":10911")]
    return address


def topic_config(spec: str) -> TopicConfig:
    """`T:4` (4 read and write queues) or `T:8/2` (8 read, 2 write), perm read+write."""
    topic, queues = spec.split(":")
    read, _, write = queues.partition("/")
    return TopicConfig(
        topic_name=topic,
        read_queue_nums=int(read),
        write_queue_nums=int(write or read),
        perm=PERM_READ | PERM_WRITE,
    )


def wrapper(
    topics: list[str] | tuple[str, ...] = (), *, counter: int = 0, state_version: int = 0
) -> TopicConfigAndMappingSerializeWrapper:
    configs = [topic_config(spec) for spec in topics]
    return TopicConfigAndMappingSerializeWrapper(
        topic_config_table={config.topic_name: config for config in configs},
        data_version=DataVersion(
            state_version=state_version, timestamp=1_700_000_000_000, counter=counter
        ),
    )


@dataclass(slots=True)
class Registration:
    """One `reg` step, parsed."""

    address: str
    broker_name: str
    broker_id: int
    topics: list[str] = field(default_factory=list)
    counter: int = 0
    state_version: int = 0
    now_ms: int = 0
    channel: int | None = None
    ha_server_addr: str | None = None
    heartbeat_timeout_ms: int | None = None
    enable_acting_master: bool | None = False
    cluster: str = CLUSTER
    zone_name: str | None = None

    def header(self) -> RegisterBrokerRequestHeader:
        return RegisterBrokerRequestHeader(
            broker_name=self.broker_name,
            broker_addr=self.address,
            cluster_name=self.cluster,
            ha_server_addr=self.ha_server_addr or self.address.replace(":10911", ":10912"),
            broker_id=self.broker_id,
            heartbeat_timeout_millis=self.heartbeat_timeout_ms,
            enable_acting_master=self.enable_acting_master,
            zone_name=self.zone_name,
        )

    def wrapper(self) -> TopicConfigAndMappingSerializeWrapper:
        return wrapper(self.topics, counter=self.counter, state_version=self.state_version)


def _options(words: list[str]) -> dict[str, str]:
    return dict(word.split("=", 1) for word in words if "=" in word)


def parse_registration(step: str) -> Registration:
    words = step.split()
    assert words[0] == "reg", step
    broker_name, broker_id = words[2].split("#")
    options = _options(words[3:])
    return Registration(
        address=addr(words[1]),
        broker_name=broker_name,
        broker_id=int(broker_id),
        topics=[word for word in words[3:] if "=" not in word and ":" in word],
        counter=int(options.get("dv", "0")),
        state_version=int(options.get("sv", "0")),
        now_ms=int(options.get("at", "0")),
        channel=int(options["ch"]) if "ch" in options else None,
        ha_server_addr=addr(options["ha"]) if "ha" in options else None,
        heartbeat_timeout_ms=int(options["timeout"]) if "timeout" in options else None,
        enable_acting_master=None if "old" in words else "acting" in words,
        cluster=options.get("cluster", CLUSTER),
        zone_name=options.get("zone"),
    )


def default_channel(address: str) -> int:
    """One channel per address unless a step says otherwise."""
    return sum(address.encode()) * 1000 + len(address)


def apply(
    manager: RouteInfoManager, step: str
) -> RegisterBrokerResult | RemovedBroker | list[RemovedBroker]:
    """Carry out one step (module docstring) and return what the manager returned."""
    words = step.split()
    options = _options(words[1:])
    match words[0]:
        case "reg":
            registration = parse_registration(step)
            channel = registration.channel
            return manager.register_broker(
                registration.header(),
                registration.wrapper(),
                channel=default_channel(registration.address) if channel is None else channel,
                now_ms=registration.now_ms,
            )
        case "unreg":
            broker_name, broker_id = words[2].split("#")
            return manager.unregister_broker(
                cluster_name=options.get("cluster", CLUSTER),
                broker_addr=addr(words[1]),
                broker_name=broker_name,
                broker_id=int(broker_id),
            )
        case "scan":
            return manager.scan_not_active_broker(now_ms=int(options["at"]))
        case "close":
            return manager.on_channel_destroy(int(options["ch"]))
        case _:
            raise AssertionError(f"unknown step {step!r}")


def run_steps(steps: str, *, broker_channel_expired_time_ms: int = 120_000) -> RouteInfoManager:
    """A fresh manager after the `;`-separated steps."""
    manager = RouteInfoManager(broker_channel_expired_time_ms=broker_channel_expired_time_ms)
    for step in steps.split(";"):
        if step.strip():
            apply(manager, step.strip())
    return manager


def _perm(perm: int) -> str:
    return ("r" if perm & PERM_READ else "-") + ("w" if perm & PERM_WRITE else "-")


def tables(manager: RouteInfoManager) -> str:
    """The broker sets and topics of `manager`, drawn as in the module docstring."""
    info = manager.get_all_cluster_info()
    sets = " ".join(
        f"{name}{{{' '.join(f'{i}:{name_of(a)}' for i, a in sorted(data.broker_addrs.items()))}}}"
        for name, data in sorted(info.broker_addr_table.items())
    )
    topics = []
    for topic in sorted(manager.topics()):
        route = manager.pickup_topic_route_data(topic)
        queues = [] if route is None else sorted(route.queue_datas, key=lambda q: q.broker_name)
        drawn = " ".join(f"{q.broker_name}={q.read_queue_nums}{_perm(q.perm)}" for q in queues)
        topics.append(f"{topic}[{drawn}]")
    return f"{sets} | {' '.join(topics)}".strip()
