"""Test-only Celery tasks, loaded into a real worker with ``--include tests.celery_probe``
(tests/test_celery_faults.py): each notes its runs in a file, so the test sees what ran
where the worker was killed or lost its broker."""

from __future__ import annotations

import os
import time
from pathlib import Path

from celery import shared_task


def _note(path: str, line: str) -> None:
    with Path(path).open("a") as out:
        out.write(f"{line}\n")
        out.flush()
        os.fsync(out.fileno())


# Late acks, as the portal's idempotent tasks: the message is acknowledged after the run,
# so a worker killed mid-run leaves it to the next worker.
@shared_task(name="tests.probe.slow", acks_late=True, reject_on_worker_lost=True)
def slow(path: str, tag: str, seconds: float) -> str:
    _note(path, f"start {tag} {os.getpid()}")
    time.sleep(seconds)
    _note(path, f"done {tag} {os.getpid()}")
    return tag


# Late acks too. Holds its worker until ``flag`` exists (at most ``limit`` seconds), so a
# test can kill the worker mid-task without racing a timer; the run again after the kill
# finds the flag there and ends at once. Notes the worker's main process (the pool's
# parent) and the time.
@shared_task(name="tests.probe.hold", acks_late=True, reject_on_worker_lost=True)
def hold(path: str, tag: str, flag: str, limit: float = 120.0) -> str:
    _note(path, f"start {tag} {os.getpid()} {os.getppid()} {time.time():.3f}")
    deadline = time.monotonic() + limit
    while not Path(flag).exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    _note(path, f"done {tag} {os.getpid()} {os.getppid()} {time.time():.3f}")
    return tag
