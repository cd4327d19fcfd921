"""``progress=`` of the package's long calls (e2e runs, verify, attribute): a callable
(done, total, what) as it is, or True: a tqdm bar when tqdm is installed, else a line rewritten in
place on stderr (TerminalLine, also what ``python3 -m attnsim e2e`` shows on a terminal)."""
from __future__ import annotations

import os
import sys
import time


def check(progress) -> None:
    """Refuses anything but None, a bool or a callable, in one line."""
    if not (progress is None or isinstance(progress, bool) or callable(progress)):
        raise ValueError(f"progress must be True, False, None or a callable (done, total, what), "
                         f"got {progress!r}"[:200])


class TerminalLine:
    """A progress line on a terminal: ``line(done, total, what)`` rewrites it in place (\\r; at most
    every 0.1 s, and the last step always), ``line.close()`` clears it. What the command line shows
    when stderr is a terminal, and ``progress=True`` without tqdm."""

    def __init__(self, stream=None, prefix: str = ""):
        self.stream, self.prefix = stream if stream is not None else sys.stderr, prefix
        self.width, self.last = 0, -1.0

    def __call__(self, done: int, total: int, what: str) -> None:
        now = time.monotonic()
        if done < total and 0 <= self.last and now - self.last < 0.1:
            return
        self.last = now
        try:
            cols = os.get_terminal_size(self.stream.fileno()).columns
        except (AttributeError, OSError, ValueError):  # not a terminal, or no file descriptor
            cols = 0
        pct = 100 * done // total if total else 100
        # Cut to the terminal's width: a line that wraps cannot be rewritten by \r.
        text = f"{self.prefix}{pct:3d}% {done}/{total} {what}"[:(cols or 80) - 1]
        # Padded over the previous text, which may have been longer (no terminal escape codes).
        self.stream.write("\r" + text.ljust(self.width))
        self.stream.flush()
        self.width = len(text)

    def close(self) -> None:
        if self.width:
            self.stream.write("\r" + " " * self.width + "\r")
            self.stream.flush()
            self.width = 0


def reporter(progress, total: int = 1, unit: str = "step"):
    """(report, close) of a ``progress=`` argument (check() first): None and False nothing, a
    callable as it is, True a tqdm bar on stderr (tqdm.auto: a widget in a notebook) removed at the
    end, when tqdm is installed, else a TerminalLine."""
    check(progress)
    if progress is None or progress is False:
        return None, lambda: None
    if progress is not True:
        return progress, lambda: None
    try:
        from tqdm.auto import tqdm
    except ImportError:
        line = TerminalLine()
        return line, line.close
    bar = tqdm(total=total, unit=unit, leave=False, dynamic_ncols=True)

    def report(done, total, what):
        bar.total = total
        bar.set_postfix_str(what, refresh=False)
        bar.update(done - bar.n)
    return report, bar.close
