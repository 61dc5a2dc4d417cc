"""The fleet side of lockdown (docs/fleet.md): a production agent streaming per-request records
and Excimer stacks to Redis, a collector writing them to a time-partitioned store, and the
reports and URL lists read from that store."""
