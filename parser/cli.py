"""How the command-line tools report bad input: one line, no traceback.

``error: FILE:LINE: what is wrong`` on standard error and exit status 2 for anything the
user can fix (a malformed or missing file, a file that is not a checkpoint, settings that
cannot work: ``ConfigurationError`` from the parser, the data or an objective, an option
value the command line rejects, trainer settings Lightning rejects as a misconfiguration),
also when it surfaces as the cause of another error; ``error: FILE: what happened`` and
exit status 1 for a fault of the machine that names a file (an ``OSError`` such as a full
disk) or for a run whose other process is gone (a collective of ``torch.distributed``
failed: gloo and NCCL see the process killed at once, one that hangs after the process
group's timeout). The full traceback only with ``--debug`` on the command line or ``TREEEXP_DEBUG=1``.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import traceback
from collections.abc import Callable
from typing import TypeVar

from lightning.fabric.utilities.exceptions import MisconfigurationException

from objectives.conventions import ConfigurationError

from parser.data.sentences import ConlluError
from parser.training.checkpoint import CheckpointError

T = TypeVar("T")
USER_ERRORS = (ConlluError, CheckpointError, ConfigurationError, MisconfigurationException, FileNotFoundError,
               IsADirectoryError, PermissionError, argparse.ArgumentError)


class Failure(RuntimeError):
    """A failure whose message says what failed and where to look (a child run's error line and
    its log): reported as it is, in one line (exit 1)."""


WORKER_TRACEBACK = "Original Traceback"  # torch raises a DataLoader worker's error again with its traceback as message


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
        if debugging() or error is None and not lost_process(raised):
            raise
        if error is None:
            print(f"error: another process of this run stopped or cannot be reached ({_first_line(raised)}); "
                  "resume from its last checkpoint with --ckpt_path", file=sys.stderr)
            raise SystemExit(1) from None
        print(f"error: {message(error)}", file=sys.stderr)
        raise SystemExit(2 if isinstance(error, USER_ERRORS) else 1) from None


def lost_process(error: BaseException) -> bool:
    """Whether ``error`` is a ``torch.distributed`` call failing (gloo and NCCL report a peer
    gone as a ``RuntimeError``)."""
    frames = traceback.extract_tb(error.__traceback__)
    return isinstance(error, RuntimeError) and any("torch/distributed/" in frame.filename for frame in frames[-3:])


def _first_line(error: BaseException) -> str:
    return next(iter(str(error).splitlines()), type(error).__name__)


def user_error(error: BaseException) -> BaseException | None:
    """``error`` or the first error in its chain of causes that the user can fix (an option's
    value checked while the command line builds an object comes wrapped in the parser's own
    error), that names the file the machine failed on, or that says all (a :class:`Failure`);
    else ``None``."""
    while error is not None and not (isinstance(error, (*USER_ERRORS, Failure))
                                     or isinstance(error, OSError) and error.filename):
        error = error.__cause__ or error.__context__
    return error


def message(error: BaseException) -> str:
    """One line: the file of an OS error; the option and the check it failed of a
    command-line error (whose own message spans lines)."""
    if isinstance(error, OSError) and error.filename:
        return f"{error.filename}: {error.strerror}"
    lines = [line.strip().removeprefix("- ").strip() for line in str(error).splitlines() if line.strip()]
    if len(lines) > 1 and lines[0].startswith("Caught ") and lines[1].startswith(WORKER_TRACEBACK):  # a worker's error
        return re.sub(r"^[\w.]+: ", "", lines[-1])
    if len(lines) > 1 and isinstance(error, argparse.ArgumentError):
        detail = next((line for line in lines[1:] if "Got value" in line), lines[-1])
        return f"{lines[0]} {detail}"
    return " ".join(lines)
