"""How the command-line tools report bad input: one line, no traceback.

``error: FILE:LINE: what is wrong`` on standard error and exit status 2 for anything the
user can fix (a malformed or missing file, a file that is not a checkpoint, settings that
cannot work: ``ConfigurationError`` from the parser, the data or an objective, an option
value the command line rejects, trainer settings Lightning rejects as a misconfiguration),
also when it surfaces as the cause of another error; ``error: FILE: what happened`` and
exit status 1 for a fault of the machine that names a file (an ``OSError`` such as a full
disk). The full traceback only with ``--debug`` on the command line or ``TREEEXP_DEBUG=1``.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from typing import TypeVar

from lightning.fabric.utilities.exceptions import MisconfigurationException

from objectives.conventions import ConfigurationError

from parser.data.sentences import ConlluError
from parser.training.checkpoint import CheckpointError

T = TypeVar("T")
USER_ERRORS = (ConlluError, CheckpointError, ConfigurationError, MisconfigurationException, FileNotFoundError,
               IsADirectoryError, PermissionError, argparse.ArgumentError)


def debugging(argv: list[str] | None = None) -> bool:
    """Whether tracebacks were asked for (``--debug`` or ``TREEEXP_DEBUG`` set)."""
    argv = sys.argv[1:] if argv is None else argv
    return "--debug" in argv or os.environ.get("TREEEXP_DEBUG", "") not in ("", "0")


def run_reporting_errors(main: Callable[[], T]) -> T:
    """Run ``main``; a user error ends the program with one ``error:`` line (exit 2), a
    fault of the machine naming a file too (exit 1)."""
    try:
        return main()
    except Exception as raised:
        error = user_error(raised)
        if error is None or debugging():
            raise
        print(f"error: {message(error)}", file=sys.stderr)
        raise SystemExit(2 if isinstance(error, USER_ERRORS) else 1) from None


def user_error(error: BaseException) -> BaseException | None:
    """``error`` or the first error in its chain of causes that the user can fix or that
    names the file the machine failed on (an option's value checked while the command line
    builds an object comes wrapped in the parser's own error), else ``None``."""
    while error is not None and not (isinstance(error, USER_ERRORS) or isinstance(error, OSError) and error.filename):
        error = error.__cause__ or error.__context__
    return error


def message(error: BaseException) -> str:
    """One line: the file of an OS error; the option and the check it failed of a
    command-line error (whose own message spans lines)."""
    if isinstance(error, OSError) and error.filename:
        return f"{error.filename}: {error.strerror}"
    lines = [line.strip().removeprefix("- ").strip() for line in str(error).splitlines() if line.strip()]
    if len(lines) > 1 and isinstance(error, argparse.ArgumentError):
        detail = next((line for line in lines[1:] if "Got value" in line), lines[-1])
        return f"{lines[0]} {detail}"
    return " ".join(lines)
