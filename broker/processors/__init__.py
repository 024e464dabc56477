"""Request processors of the broker, one module per concern (send, pull, offsets, client, admin),
and the router that hands each request code to its processor (`router`)."""
