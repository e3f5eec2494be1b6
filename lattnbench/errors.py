"""Exceptions the measurement code raises to mark a point's status rather than crash a sweep."""


class Unsupported(RuntimeError):
    """The measurement cannot be made here (recorded as ``unsupported`` with this message)."""


class PointTimeout(RuntimeError):
    """A point ran past its time limit (recorded as ``timeout``)."""


#: the exit status of a rank that stops because another rank stopped answering (a consequence,
#: so the runner blames a rank that ended otherwise when there is one)
PEER_LOST_EXIT = 3
