"""The tests' ports: outside the kernel's ephemeral range (where an outgoing connection
could take one between the check and the child's bind), free when handed out, and not the
same ones twice (tests/procs.py)."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from tests import procs


def test_the_ephemeral_range_is_read_from_proc_or_falls_back(tmp_path: Path):
    ranges = tmp_path / "ip_local_port_range"
    ranges.write_text("40000\t50000\n")
    assert procs.ephemeral_range(ranges) == (40000, 50000)
    for text in ("", "garbage", "50000 40000", "0 70000"):
        ranges.write_text(text)
        assert procs.ephemeral_range(ranges) == procs.EPHEMERAL_FALLBACK
    assert procs.ephemeral_range(tmp_path / "missing") == procs.EPHEMERAL_FALLBACK


def test_ports_are_chosen_below_and_above_the_ephemeral_range():
    assert procs.port_ranges((32768, 60999)) == [range(10000, 32768), range(61000, 65536)]
    assert procs.port_ranges((32768, 65535)) == [range(10000, 32768)]
    # A range that leaves nothing outside it: any port from LOWEST_PORT, rather than none.
    assert procs.port_ranges((1024, 65535)) == [range(10000, 65536)]


def test_free_ports_are_outside_the_ephemeral_range_bindable_and_never_handed_out_twice():
    low, high = procs.ephemeral_range()
    blocks = [procs.free_ports(3) for _ in range(20)]
    ports = [first + i for first in blocks for i in range(3)]
    ports += [procs.free_port() for _ in range(20)]
    assert len(set(ports)) == len(ports)
    assert all(not low <= port <= high and port >= procs.LOWEST_PORT for port in ports)
    for port in ports:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", port))


def test_a_port_in_use_is_skipped_and_a_block_stays_inside_its_range(monkeypatch):
    first = procs.free_ports(3)
    monkeypatch.setattr(procs, "_handed_out", set())  # as if another run had picked them
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", first))
        taken.listen()
        with pytest.raises(RuntimeError):
            procs.free_ports(1, ranges=[range(first, first + 1)])
        # The whole block must be free: only the one after the taken port is left.
        assert procs.free_ports(2, ranges=[range(first, first + 3)]) == first + 1


def test_each_xdist_worker_draws_from_a_share_of_its_own():
    ranges = [range(10000, 32768), range(61000, 65536)]
    assert procs.worker_share(ranges, "", "") == ranges  # not under xdist
    assert procs.worker_share(ranges, "gw0", "1") == ranges
    shares = [procs.worker_share(ranges, f"gw{i}", "3") for i in range(3)]
    for i, whole in enumerate(ranges):
        ports = [port for share in shares for port in share[i]]
        assert ports == list(whole)  # every port in exactly one share, none left out
    assert shares[1][0] == range(17589, 25178)
