# Parallel jobs in the peer: routing, co-scheduling and recovery. SchedAgent
# (agent.py) is the facade; entry.py, placement.py + representative.py +
# balance.py and member.py are the three roles; beats.py and liveness.py keep
# peers' liveness; config.py, records.py, states.py, view.py, matchmaking.py
# and context.py are the pieces they share.
