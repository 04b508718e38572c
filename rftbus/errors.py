"""The root of rftbus's own errors: the CLI prints these as one clear message, never a traceback."""


class RftbusError(Exception):
    """An error whose message is meant for the user as-is."""
