"""The servers' CPU time per request (harness/server_cpu.py): a process tree's ticks, counted
once whether a child is alive or already reaped into its parent's children's time."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from lockdown.harness import server_cpu

# burn ~0.4 s of CPU in a child, then in a grandchild that is reaped, then sleep
SPIN = "import time\nt=time.process_time()\nwhile time.process_time()-t<0.4: pass\n"
TREE = (SPIN + "import subprocess,sys\n"
        f"subprocess.run([sys.executable,'-c',{SPIN!r}])\n"
        "print('spun',flush=True)\ntime.sleep(30)\n")


def test_a_tree_counts_its_live_and_reaped_children_once():
    before_start = server_cpu.snapshot({})
    assert before_start == {}
    root = subprocess.Popen([sys.executable, "-c", "import subprocess,sys\n"
                             f"p=subprocess.Popen([sys.executable,'-c',{TREE!r}])\np.wait()"],
                            stdout=subprocess.PIPE, text=True, start_new_session=True)
    idle = subprocess.Popen(["sleep", "30"])
    servers = {"tree": root.pid, "idle": idle.pid}
    try:
        first = server_cpu.snapshot(servers)
        assert root.stdout.readline() == "spun\n"
        second = server_cpu.snapshot(servers)
        seconds = (second["tree"] - first["tree"]) / server_cpu.TICKS_PER_S
        # two spins of 0.4 s (the child's own, live; the grandchild's, reaped into the child)
        assert 0.7 <= seconds <= 2.0, seconds
        used = server_cpu.usage(first, second, requests=4)
        assert used["seconds"] == round(seconds, 2)
        # each server's share apart: the spinning tree's, and none for the one asleep
        assert used["ms_per_request"] == round(1000 * seconds / 4, 3) == used["by_server"]["tree"]
        assert used["by_server"]["idle"] == 0
        time.sleep(0.1)
        assert server_cpu.snapshot(servers) == second      # asleep: no more ticks
    finally:
        os.killpg(root.pid, signal.SIGKILL)      # the child asleep under it too
        idle.kill()
        root.wait(), idle.wait()
    # a root gone between the snapshots, or nothing served: unknown, never a wrong figure
    assert server_cpu.snapshot(servers) == {}
    assert server_cpu.usage(first, {"tree": second["tree"]}, requests=4) == {}
    assert server_cpu.usage(first, second, requests=0) == {}
