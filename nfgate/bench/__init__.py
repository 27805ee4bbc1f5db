"""``nfgate bench``: throughput, latency, CPU and memory of the gateway against a raw relay."""
