"""asrptd's timer: a plain loop on the monotonic clock with a stop event (issue 16).

APScheduler deadlocked on SIGTERM during a cycle (its shutdown held the job-store lock the
cycle needed), and it timed intervals on the wall clock."""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace

from asrpt.daemon.config import DaemonConfig, DaemonSection
from asrpt.daemon.main import next_cycle_delay_s, run_loop


class StubDaemon:
    """Counts calls; a cycle may take a while."""

    def __init__(self, *, interval_s: float = 0.05, cycle_s: float = 0.0, on_cycle=None) -> None:
        self.config = DaemonConfig(daemon=DaemonSection(interval_s=interval_s, sync_interval_s=3600.0, retrain_interval_s=3600.0, max_backoff_s=300.0))
        self.stats = SimpleNamespace(cycles=0, failures=0, consecutive_failures=0, backoff_failures=0, last_error="", jobs_isolated=0)
        self.cycle_s = cycle_s
        self.on_cycle = on_cycle
        self.syncs = 0

    def cycle(self):
        if self.on_cycle is not None:
            self.on_cycle(self)
        time.sleep(self.cycle_s)
        self.stats.cycles += 1
        return object()

    def sync_finished(self) -> int:
        self.syncs += 1
        return 0

    def retrain(self) -> int:
        return 0


def _run(daemon, stopping, *, seconds: float) -> threading.Thread:
    thread = threading.Thread(target=run_loop, args=(daemon, stopping), daemon=True)
    thread.start()
    if seconds:
        time.sleep(seconds)
    return thread


def test_a_stop_during_a_long_cycle_returns_as_soon_as_the_cycle_ends() -> None:
    stopping = threading.Event()
    daemon = StubDaemon(interval_s=0.01, cycle_s=0.5, on_cycle=lambda d: stopping.set())
    started = time.monotonic()
    thread = _run(daemon, stopping, seconds=0)
    thread.join(timeout=5)
    assert not thread.is_alive()
    assert time.monotonic() - started < 1.5
    assert daemon.stats.cycles == 1


def test_a_stop_while_waiting_returns_at_once() -> None:
    stopping = threading.Event()
    daemon = StubDaemon(interval_s=600.0)
    thread = _run(daemon, stopping, seconds=0.05)
    started = time.monotonic()
    stopping.set()
    thread.join(timeout=5)
    assert not thread.is_alive() and time.monotonic() - started < 1.0


def test_a_wall_clock_stepped_back_does_not_delay_cycles(monkeypatch) -> None:
    real_time = time.time
    monkeypatch.setattr(time, "time", lambda: real_time() - 600.0)  # NTP stepped 10 minutes back
    stopping = threading.Event()
    daemon = StubDaemon(interval_s=0.05)
    thread = _run(daemon, stopping, seconds=0.6)
    stopping.set()
    thread.join(timeout=5)
    assert daemon.stats.cycles >= 5


def test_an_error_in_a_periodic_job_does_not_stop_the_loop() -> None:
    stopping = threading.Event()
    daemon = StubDaemon(interval_s=0.02)
    daemon.config = DaemonConfig(daemon=DaemonSection(interval_s=0.02, sync_interval_s=0.02, retrain_interval_s=3600.0))

    def broken() -> int:
        daemon.syncs += 1
        raise RuntimeError("sacct output nobody expected")

    daemon.sync_finished = broken
    thread = _run(daemon, stopping, seconds=0.3)
    stopping.set()
    thread.join(timeout=5)
    assert daemon.syncs >= 3 and daemon.stats.cycles >= 3


def test_the_back_off_grows_with_failed_polls_and_resets_on_the_first_good_one() -> None:
    daemon = StubDaemon(interval_s=30.0)
    assert next_cycle_delay_s(daemon) == 30.0
    daemon.stats.backoff_failures = 3
    assert next_cycle_delay_s(daemon) == 240.0
    daemon.stats.backoff_failures = 10_000  # no overflow, capped
    assert next_cycle_delay_s(daemon) == 300.0
    daemon.stats.backoff_failures = 0
    assert next_cycle_delay_s(daemon) == 30.0


def test_systemd_hears_ready_before_a_long_first_cycle(tmp_path, monkeypatch) -> None:
    """A 10,000-job first cycle took 94 s, past systemd's start timeout: READY must come
    before it (issue 16), and the first cycle still runs before the loop's interval."""
    import os
    import signal
    import socket

    import asrpt.daemon.main as daemon_main

    notify_path = str(tmp_path / "notify")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    listener.bind(notify_path)
    listener.setblocking(False)
    monkeypatch.setenv("NOTIFY_SOCKET", notify_path)

    def received() -> list[str]:
        messages = []
        while True:
            try:
                messages.append(listener.recv(4096).decode())
            except BlockingIOError:
                return messages

    heard_during_first_cycle: list[str] = []

    def first_cycle(daemon) -> None:
        if daemon.stats.cycles == 0:
            heard_during_first_cycle.extend(received())
            os.kill(os.getpid(), signal.SIGTERM)  # stop after this cycle

    stub = StubDaemon(interval_s=600.0, on_cycle=first_cycle)
    stub.config = DaemonConfig(daemon=DaemonSection(interval_s=600.0, sync_interval_s=3600.0, retrain_interval_s=3600.0,
                                                    max_backoff_s=600.0, release_holds_on_stop=False, socket_path=""))
    stub.policy = SimpleNamespace(name="stub")
    monkeypatch.setattr(daemon_main, "build_daemon", lambda *args, **kwargs: stub)
    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        assert daemon_main.main(["--config", str(tmp_path / "unused.toml")]) == 0
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)
        listener.close()
    assert stub.stats.cycles == 1
    assert any("READY=1" in message.split("\n") for message in heard_during_first_cycle), heard_during_first_cycle


_STRESS = r"""
import signal, sys, threading, time
from asrpt.daemon.main import StopFlag
kind = sys.argv[1]
make = StopFlag if kind == "flag" else threading.Event
stop = make()
signal.signal(signal.SIGALRM, lambda *_: stop.set())
signal.setitimer(signal.ITIMER_REAL, 0.001, 0.001)  # a signal every millisecond
end = time.monotonic() + 1.5
while time.monotonic() < end:
    stop.clear()
    stop.wait(0.0005)
signal.signal(signal.SIGALRM, signal.SIG_IGN)
signal.setitimer(signal.ITIMER_REAL, 0)
print("done")
"""


def test_a_stop_signal_during_the_wait_never_deadlocks() -> None:
    """A CI run left asrptd hung for good after SIGTERM: py-spy showed the handler's
    ``Event.set`` waiting for the lock its own thread held inside ``Event.wait`` in run_loop.
    The daemon's StopFlag takes no lock: thousands of signals landing in its wait pass."""
    import subprocess
    import sys

    result = subprocess.run([sys.executable, "-c", _STRESS, "flag"], capture_output=True, text=True, timeout=30)
    assert result.returncode == 0 and result.stdout.strip() == "done", result.stderr


def test_the_stop_flag_waits_and_wakes_like_an_event() -> None:
    from asrpt.daemon.main import StopFlag

    flag = StopFlag()
    started = time.monotonic()
    assert flag.wait(0.05) is False and time.monotonic() - started >= 0.04
    threading.Timer(0.05, flag.set).start()
    started = time.monotonic()
    assert flag.wait(5.0) is True and time.monotonic() - started < 1.0
    assert flag.is_set() and flag.wait(0) is True
