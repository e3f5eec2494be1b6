"""Exceptions the measurement code raises to mark a point's status rather than crash a sweep, and
the one a run raises for a problem the user can fix (the command line prints it, exit 2)."""


class Unsupported(RuntimeError):
    """The measurement cannot be made here (recorded as ``unsupported`` with this message)."""


class PointTimeout(RuntimeError):
    """A point ran past its time limit (recorded as ``timeout``)."""


#: the exit status of a rank that stops because another rank stopped answering (a consequence,
#: so the runner blames a rank that ended otherwise when there is one)
PEER_LOST_EXIT = 3


class RunError(RuntimeError):
    """A run cannot start or go on (a bad option, a results file that cannot be written): the
    command line prints the message on one line and exits 2."""
