"""pyrmq remoting package: the RocketMQ remoting protocol (docs/remoting-protocol.md).

Pure cores: `codes` (request/response codes, languages, flags), `command` (`RemotingCommand`),
`codec` (frames <-> commands, JSON and ROCKETMQ headers), `fastjson` (JSON text as fastjson
writes and reads it), `headers` (typed `extFields`), `bodies` (typed JSON bodies).
`local_address` (the host's outward address).
Shells: `connection` (one bounded connection, both directions), `server`, `client`.
Errors: `errors`. Imports nothing else of pyrmq.
"""
