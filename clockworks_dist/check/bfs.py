"""Breadth-first frontier: the counterexamples it finds are shortest."""

from collections import deque


class BreadthFirst:
    name = "bfs"

    def __init__(self) -> None:
        self._queue: deque = deque()

    def push(self, state) -> None:
        self._queue.append(state)

    def pop(self):
        return self._queue.popleft()

    def __len__(self) -> int:
        return len(self._queue)

    def __iter__(self):
        return iter(self._queue)
