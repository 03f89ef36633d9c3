# Parallel jobs in the peer: routing, co-scheduling and recovery (agent.py).
