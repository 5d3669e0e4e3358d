"""The performance model: a timed execution of the schedule's semantics on a topology."""
