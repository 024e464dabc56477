"""pyrmq broker package: one broker node (`node.BrokerNode`, CLI `pyrmq-broker`).

Pure cores: `properties` (Java .properties syntax), `config` (broker.conf -> `BrokerConfig`),
`runtime_stats.TpsWindows`, `pull_hold.ParkedPulls`, and the status and
header mappings of the processors. Shells and state: `topic_config`, `subscription_groups`,
`consumer_offsets` (with `config_file`: the `config/*.json` files), `client_manager`,
`pull_hold`, `processors/` (send, pull, offsets, client, admin, router),
`namesrv_registration`, `metrics` and `metrics_http` (pyrmq's own client is `pyrmq_client`).
Errors: `errors`.
"""
