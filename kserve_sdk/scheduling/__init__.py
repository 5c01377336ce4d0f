"""Scheduling a model's calls: how many run at once, the priority queue the others wait in, their
deadlines (docs/scheduling.md); the warm-up that runs before a model is ready (docs/warmup.md)."""
from .policy import SchedulingPolicy
from .scheduler import Scheduler, Ticket
from .warmup import Warmup, WarmupInput

__all__ = ["SchedulingPolicy", "Scheduler", "Ticket", "Warmup", "WarmupInput"]
