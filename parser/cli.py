"""How the command-line tools report bad input: one line, no traceback.

``error: FILE:LINE: what is wrong`` on standard error and exit status 2 for anything the
user can fix (a malformed or missing file, a file that is not a checkpoint, trainer settings
Lightning rejects as a misconfiguration); the full
traceback only with ``--debug`` on the command line or ``TREEEXP_DEBUG=1``.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import TypeVar

from lightning.fabric.utilities.exceptions import MisconfigurationException

from .checkpoint import CheckpointError
from .sentences import ConlluError

T = TypeVar("T")
USER_ERRORS = (ConlluError, CheckpointError, MisconfigurationException, FileNotFoundError, IsADirectoryError, PermissionError)


def debugging(argv: list[str] | None = None) -> bool:
    """Whether tracebacks were asked for (``--debug`` or ``TREEEXP_DEBUG`` set)."""
    argv = sys.argv[1:] if argv is None else argv
    return "--debug" in argv or os.environ.get("TREEEXP_DEBUG", "") not in ("", "0")


def run_reporting_errors(main: Callable[[], T]) -> T:
    """Run ``main``; a user error ends the program with one ``error:`` line (exit 2)."""
    try:
        return main()
    except USER_ERRORS as error:
        if debugging():
            raise
        message = str(error) if not isinstance(error, OSError) or not error.filename else f"{error.filename}: {error.strerror}"
        print(f"error: {message}", file=sys.stderr)
        raise SystemExit(2) from None
