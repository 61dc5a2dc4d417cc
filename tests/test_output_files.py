"""Writing the documents: whole or not at all, and never by replacing something that is not a
plain file. As root, renaming a temporary file over `-o /dev/stdout` would have replaced the
system's /dev/stdout link with a regular file."""
import os
import threading

import pytest

from lockdown.errors import LockdownError
from lockdown.reports.output import write_text_atomic


def test_a_link_is_followed_and_stays_a_link(tmp_path):
    real, link = tmp_path / "real.svg", tmp_path / "link.svg"
    link.symlink_to(real)                       # dangling: the file is created behind it
    write_text_atomic(link, "one")
    assert link.is_symlink() and real.read_text() == "one"
    write_text_atomic(link, "two")              # and replaced there, the link left alone
    assert link.is_symlink() and real.read_text() == "two"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link.svg", "real.svg"]


def test_a_pipe_is_written_to_not_replaced(tmp_path):
    fifo = tmp_path / "out.fifo"
    os.mkfifo(fifo)
    got = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_text()), daemon=True)
    reader.start()
    write_text_atomic(fifo, "stacks 1\n")
    reader.join(10)
    assert got == ["stacks 1\n"]
    assert fifo.is_fifo() and [p.name for p in tmp_path.iterdir()] == ["out.fifo"]


@pytest.mark.parametrize("name", ["", ".", "/"])
def test_a_path_that_names_no_file_is_refused(name):
    with pytest.raises(LockdownError, match="not a file name"):
        write_text_atomic(name, "x")
