"""The one exception type the CLI turns into a single clear line and a non-zero exit."""


class LockdownError(Exception):
    """A problem the user can act on: the message says what is wrong and what to do."""

    exit_code = 2


class PhaseFailed(LockdownError):
    """A harness phase failed; `details` holds the evidence printed under the one-line message."""

    def __init__(self, message: str, details: str = ""):
        super().__init__(message)
        self.details = details
