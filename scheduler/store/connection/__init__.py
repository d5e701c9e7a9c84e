"""How the scheduler reaches Redis: where it is now (discovery.py: Sentinel, Cluster), the
API's multiplexed connection (mux.py), its pub/sub connection for long-polls (notify.py), and
the blocking clients of the workers, the snapshot and the command line (blocking.py)."""
