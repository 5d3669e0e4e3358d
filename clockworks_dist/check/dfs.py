"""Depth-first frontier: finds deep states (deadlocks at the end of a run) first, little memory."""


class DepthFirst:
    name = "dfs"

    def __init__(self) -> None:
        self._stack: list = []

    def push(self, state) -> None:
        self._stack.append(state)

    def pop(self):
        return self._stack.pop()

    def __len__(self) -> int:
        return len(self._stack)
