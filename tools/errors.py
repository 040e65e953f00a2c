"""The one exception type whose message is a complete, one-line explanation for the user.

The CLI prints such an error as `kernelblaster: <message>` and exits with its `exit_status`, never with a
traceback. Every layer raises it (or a subclass) for bad input it can name: a broken file, a missing tool,
a bad flag.
"""


class UserFacingError(ValueError):
    """Bad input or a missing prerequisite, explained in one line that names the thing at fault.

    A `ValueError`, because the LangGraph server shows a failed run's message to the Studio user only for
    a few built-in exception types (others become "An internal error occurred"); bad input is one of them.
    """

    exit_status = 2
