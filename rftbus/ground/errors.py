"""The root of rftbus's own errors: the CLI prints these as one clear message, never a traceback."""


class RftbusError(Exception):
    """An error whose message is meant for the user as-is."""


class SwapDeferred(RftbusError):
    """A weight version could not be swapped in yet for a passing reason (an upstream server that did not answer):
    the follower keeps it and tries again, instead of refusing it for good."""
