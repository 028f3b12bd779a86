"""Streaming on top of the per-token callback: the generation loop runs in a worker thread (GIL
released while it computes) and hands each piece of text to the iterating thread through a queue."""

from __future__ import annotations

import queue
import threading
from typing import Any, Callable, Iterator, Optional

from ._core import Completion

_DONE = object()

TokenCallback = Callable[[int, str], Optional[bool]]


class TextStream:
    """An iterator over the pieces of text of one generation, as they are produced.

    Breaking out of the loop (or calling :meth:`close`) stops the generation after the current token;
    the State then holds the tokens generated so far. After the iteration ends, :attr:`completion`
    holds the :class:`Completion` (token ids, stop reason, timing).
    """

    def __init__(self, run: Callable[[TokenCallback], Completion], callback: Optional[TokenCallback]):
        self.completion: Optional[Completion] = None
        self._queue: "queue.SimpleQueue[Any]" = queue.SimpleQueue()
        self._stop = threading.Event()
        self._error: Optional[BaseException] = None
        self._callback = callback
        self._finished = False
        self._thread = threading.Thread(target=self._work, args=(run,), daemon=True)
        self._thread.start()

    def _on_text(self, token: int, text: str) -> bool:
        if self._stop.is_set():
            return False
        self._queue.put(text)
        if self._callback is not None and self._callback(token, text) is False:
            return False
        return True

    def _work(self, run: Callable[[TokenCallback], Completion]) -> None:
        try:
            self.completion = run(self._on_text)
        except BaseException as error:  # re-raised in the iterating thread
            self._error = error
        finally:
            self._queue.put(_DONE)

    def __iter__(self) -> Iterator[str]:
        return self

    def __next__(self) -> str:
        if self._finished:
            raise StopIteration
        item = self._queue.get()
        if item is _DONE:
            self._finish()
            raise StopIteration
        return item

    def _finish(self) -> None:
        self._finished = True
        self._thread.join()
        if self._error is not None:
            error, self._error = self._error, None
            raise error

    def close(self) -> None:
        """Stops the generation (after the token being computed) and waits for it."""
        if self._finished:
            return
        self._stop.set()
        while self._queue.get() is not _DONE:
            pass
        self._finish()

    def text(self) -> str:
        """Consumes the rest of the stream and returns the whole text."""
        return "".join(self)

    def __del__(self) -> None:
        if not self._finished:
            self._stop.set()

    def __enter__(self) -> "TextStream":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
