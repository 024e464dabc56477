"""pyrmq controller package: `pyrmq-controller`, the embedded name server and controller.

Pure cores: `route_info` (the name server's route tables, RocketMQ's RouteInfoManager),
`route_body` (its JSON answers as fastjson writes them), `java_hash_order` (Java hash-table
iteration order, which those answers follow), `config` (`controller.conf`); for the controller:
`replicas_info` (per broker set state and request decisions), `elect_policy`,
`broker_heartbeat` (the live-broker table), `events` (the state-machine events), `messages`
(admin bodies and headers). Shells: `server` (the RemotingServers, scans, connection-close
watchers), `controller_manager` (controller requests, elections, role-change pushes),
`event_log` (the fsynced event file). CLIs: `__main__` (pyrmq-controller), `admin`
(pyrmq-admin). Errors: `errors`. Imports `remoting` and `controller_client.messages` (the
shared wire messages; controller_client imports nothing of this package).
"""
