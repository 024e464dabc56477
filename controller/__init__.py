"""pyrmq controller package: `pyrmq-controller`, the embedded name server (controller to come).

Pure cores: `route_info` (the name server's route tables, RocketMQ's RouteInfoManager),
`route_body` (its JSON answers as fastjson writes them), `java_hash_order` (Java hash-table
iteration order, which those answers follow), `config` (`controller.conf`).
Shell: `server` (one RemotingServer, the expiry scan, connection-close watchers); CLI:
`__main__`. Errors: `errors`. Imports `remoting` only.
"""
