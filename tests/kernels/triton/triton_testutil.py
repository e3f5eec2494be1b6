"""Shared helpers of the Triton kernel tests."""


class LaunchSpy:
    """Counts launches of a kernel (kernel[grid](...)) and forwards them."""

    def __init__(self, kern):
        self.kern, self.grids = kern, []

    def __getitem__(self, grid):
        self.grids.append(grid)
        return self.kern[grid]
