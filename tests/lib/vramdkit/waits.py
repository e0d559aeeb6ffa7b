"""Polling with deadlines, and threads: wait_for(), run_threads(), Background.

Every wait in the suites is a poll with a deadline (no fixed sleep where a condition can be
polled); deadlines are generous for a slow, loaded 2-core box and ASan builds."""
import http.client
import threading
import time

import pytest

from .net import PeerClosed

# a refused or dropped connection while polling: poll again
RETRY = (OSError, PeerClosed, http.client.HTTPException)


def wait_for(cond, timeout=20.0, interval=0.05, what="condition", retry=RETRY):
    """Poll cond() until it returns a truthy value; return it, or fail after timeout.
    Exceptions of the classes in retry count as "not yet" (the last one is reported)."""
    deadline = time.monotonic() + timeout
    last_exc = None
    while True:
        try:
            value = cond()
            if value:
                return value
        except retry as e:
            last_exc = e
        if time.monotonic() > deadline:
            extra = f" (last error: {last_exc!r})" if last_exc else ""
            pytest.fail(f"timed out after {timeout}s waiting for {what}{extra}")
        time.sleep(interval)


def run_threads(funcs, timeout=90):
    """Run callables in threads at once; return their results (or exceptions) in order.
    timeout bounds the join of each thread (a thread still running leaves None)."""
    results = [None] * len(funcs)

    def wrap(i, f):
        try:
            results[i] = f()
        except Exception as e:  # surfaced to the caller
            results[i] = e

    threads = [threading.Thread(target=wrap, args=(i, f), daemon=True)
               for i, f in enumerate(funcs)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout)
    return results


class Background:
    """One call running in a thread; .result() waits for what it returned."""

    def __init__(self, func):
        self._reply = None
        self._exc = None
        self._thread = threading.Thread(target=self._run, args=(func,), daemon=True)
        self._thread.start()

    def _run(self, func):
        try:
            self._reply = func()
        except Exception as e:
            self._exc = e

    def done(self):
        return not self._thread.is_alive()

    def result(self, timeout=90):
        self._thread.join(timeout)
        if self._thread.is_alive():
            pytest.fail(f"a background request did not finish within {timeout}s")
        if self._exc:
            raise self._exc
        return self._reply
