"""What the harness's command lines share: progress lines, and a run that always tears down.

`python -m tests.harness up`, `demo` and `demo --klm` each start something, print what to look
at, then wait for Ctrl-C (or end once ready) and stop whatever they started. The exit codes:
0 after Ctrl-C, SIGTERM or a finished run; 2 when a binary is missing (MissingBinaryError);
1 on any other error. Errors are one line on stderr, without a traceback.
"""

from __future__ import annotations

import signal
import sys
import time
from collections.abc import Callable
from types import FrameType

from .binaries import MissingBinaryError


class ProgressPrinter:
    """Progress lines with the seconds since start."""

    def __init__(self) -> None:
        self.began = time.monotonic()

    def __call__(self, message: str) -> None:
        print(f"[{time.monotonic() - self.began:6.1f}s] {message}", flush=True)


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def _quiet() -> None:
    pass


def run(
    start: Callable[[], None],
    stop: Callable[[], None],
    watch: Callable[[], None] | None,
    on_error: Callable[[], None] = _quiet,
) -> int:
    """``start``; then, unless ``watch`` is None, ``watch`` every 2 s until Ctrl-C or SIGTERM.

    ``start`` starts everything and prints what is there; ``watch`` raises once something died.
    ``stop`` runs whatever happened, a second Ctrl-C ignored while it does; ``on_error`` may add
    to the error line (log tails). Returns the exit code.
    """
    signal.signal(signal.SIGTERM, _interrupt)
    # Started from a non-interactive shell with `&`, Python inherits SIGINT
    # ignored; "Ctrl-C stops everything" should hold anyway.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        start()
        if watch is not None:
            print("Ctrl-C stops everything.", flush=True)
            while True:
                watch()
                time.sleep(2)
        return 0
    except KeyboardInterrupt:
        print("\nstopping ...", flush=True)
        return 0
    except MissingBinaryError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    except Exception as error:
        print(f"error: {error}", file=sys.stderr)
        on_error()
        return 1
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not cut teardown
        stop()
        signal.signal(signal.SIGINT, signal.default_int_handler)
        print("stopped.", flush=True)
