"""A database server's log kept bounded while the server appends to it."""

from __future__ import annotations

import os
from pathlib import Path

from corral.vm.postgres.server_log import tail_bytes, trim


def test_a_log_past_its_limit_keeps_its_last_lines_and_the_writer_appends_after_them(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    writer = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)  # the server's stderr
    try:
        for n in range(2000):
            os.write(writer, f"line {n:05d} {'x' * 1000}\n".encode())
        size = log.stat().st_size
        assert trim(log, limit=size, keep=10_000) == 0  # within its limit: left alone
        removed = trim(log, limit=100_000, keep=10_000)
        os.write(writer, b"after the cut\n")
        lines = log.read_text().splitlines()
    finally:
        os.close(writer)
    assert lines[0].endswith(f"[corral] LOG:  the log passed 100000 bytes: its first {removed} bytes were removed")
    assert lines[1].startswith("line ") and lines[-2].startswith("line 01999") and lines[-1] == "after the cut"
    assert removed + sum(len(line) + 1 for line in lines[1:-1]) == size
    assert log.stat().st_size < 12_000


def test_the_tail_starts_at_a_line(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.write_bytes(b"one\ntwo\nthree\n")
    assert tail_bytes(log, 8) == (b"three\n", 14)
    assert tail_bytes(log, 100) == (b"one\ntwo\nthree\n", 14)
    assert trim(tmp_path / "gone.log") == 0
