"""`python -m rftbus`: how `rftbus run` starts its children.

A SIGTERM before the command has installed its own handlers (while it still imports torch or DeepSpeed,
or waits for the broker) is a clean stop: nothing was consumed or produced yet. Each command replaces
this handler with its own once it is ready. `rftbus run` starts its children with SIGTERM blocked, so one
that arrives before even this line runs waits for the handler instead of killing the interpreter.
"""

import signal
import sys


def _stopped_while_starting(signum, _frame):
    sys.exit(0)


signal.signal(signal.SIGTERM, _stopped_while_starting)
signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})

from rftbus.apps.cli.main import main  # noqa: E402  (after the handler: the imports are the slow part)

main()
