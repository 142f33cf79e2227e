"""Training programs that ship with the runtime (used by the demo and the example DAGs)."""
