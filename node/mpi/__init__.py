"""The MPI-like runtime that a started parallel job's tasks run (seed 002 ch. 4):
ranks connected by TCP, compute phases and collective rounds (node/mpi/task.py)."""

from node.mpi.task import Job, TaskError, run_task

__all__ = ["Job", "TaskError", "run_task"]
