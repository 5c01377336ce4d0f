"""Scheduling a model's calls: how many run at once, the priority queue the others wait in, their
deadlines (docs/scheduling.md)."""
from .policy import SchedulingPolicy
from .scheduler import Scheduler, Ticket

__all__ = ["SchedulingPolicy", "Scheduler", "Ticket"]
