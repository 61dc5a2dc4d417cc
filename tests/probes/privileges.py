"""Run as a bench hook (as root) while a stack serves: try, as the unprivileged account
`nobody`, what a local attacker would, and report as JSON on stdout what each attempt gave.

Argument: the run directory. Reads the servers' ports and sockets from their generated
configs, as an attacker would find them with `ss`."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

run_dir = Path(sys.argv[1])
report: dict = {}


def as_nobody(*argv: str, stdin: str | None = None) -> dict:
    p = subprocess.run(["runuser", "-u", "nobody", "--", *argv], input=stdin, capture_output=True,
                       text=True, timeout=60)
    return {"rc": p.returncode, "out": p.stdout.strip()[-300:], "err": p.stderr.strip()[-300:]}


my_cnf = (run_dir / "mysql" / "my.cnf").read_text()
port = re.search(r"^port = (\d+)", my_cnf, re.M).group(1)
mysql_socket = re.search(r"^socket = (\S+)", my_cnf, re.M).group(1)
fpm_socket = re.search(r"^listen = (\S+)", (run_dir / "php" / "php-fpm.conf").read_text(), re.M).group(1)

# MariaDB over TCP: as root with no password, as the app's account with no password and with
# the password lockdown used to give every app
report["tcp_root"] = as_nobody("mariadb", "--no-defaults", "-uroot", "-h127.0.0.1", f"-P{port}", "-e", "SELECT 1")
report["tcp_app_nopass"] = as_nobody("mariadb", "--no-defaults", "-ulockdown", "-h127.0.0.1", f"-P{port}",
                                     "-e", "SELECT 1")
report["tcp_app_oldpass"] = as_nobody("mariadb", "--no-defaults", "-ulockdown", "-plockdown", "-h127.0.0.1",
                                      f"-P{port}", "-e", "SELECT 1")
# the socket, named directly
report["socket_root"] = as_nobody("mariadb", "--no-defaults", "-uroot", f"-S{mysql_socket}", "-e", "SELECT 1")
# the app's account with this run's password (from its 0600 file, read here as root): it works
password = (run_dir / "mysql" / "app-password").read_text().strip()
p = subprocess.run(["runuser", "-u", "nobody", "--", "mariadb", "--no-defaults", "-ulockdown", "-h127.0.0.1",
                    f"-P{port}", "-e", "SELECT CURRENT_USER()"], capture_output=True, text=True,
                   env={**os.environ, "MYSQL_PWD": password}, timeout=60)
report["tcp_app_password"] = {"rc": p.returncode, "out": p.stdout.strip(), "err": p.stderr.strip()[-300:]}
report["app_password_mode"] = oct(os.stat(run_dir / "mysql" / "app-password").st_mode & 0o777)

# INTO OUTFILE as the server's administrator, outside the run directory
target = f"/tmp/lockdown-outfile-{os.getpid()}.txt"
p = subprocess.run(["mariadb", f"--defaults-file={run_dir / 'mysql' / 'client-root.cnf'}", "-e",
                    f"SELECT 'x' INTO OUTFILE '{target}'"], capture_output=True, text=True, timeout=60)
report["outfile"] = {"rc": p.returncode, "err": p.stderr.strip()[-300:], "created": os.path.exists(target)}
if os.path.exists(target):
    os.unlink(target)

# FastCGI to php-fpm's socket, and the run directory itself
report["fpm_connect"] = as_nobody("/usr/bin/python3", "-c",
                                  "import socket, sys; s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1])",
                                  fpm_socket)
report["list_run_dir"] = as_nobody("ls", str(run_dir))

# who the servers run as
uids = {}
for entry in os.scandir("/proc"):
    if not entry.name.isdigit():
        continue
    try:
        cmd = Path(entry.path, "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        status = Path(entry.path, "status").read_text()
    except OSError:
        continue
    if str(run_dir) not in cmd and not cmd.startswith(("php-fpm: pool", "nginx: worker")):
        continue
    uid = int(re.search(r"^Uid:\s+(\d+)", status, re.M).group(1))
    name = cmd.split()[0] if cmd.split() else "?"
    if "php-fpm: pool" in cmd or "nginx: worker" in cmd:
        # workers name no run directory: theirs if their parent's command line names it
        ppid = re.search(r"^PPid:\s+(\d+)", status, re.M).group(1)
        try:
            parent = Path(f"/proc/{ppid}/cmdline").read_bytes().decode(errors="replace")
        except OSError:
            continue
        if str(run_dir) not in parent:
            continue
        name = "php-fpm worker" if "php-fpm" in cmd else "nginx worker"
    elif "mariadbd" in cmd:
        name = "mariadbd"
    else:
        continue
    uids.setdefault(name, []).append(uid)
report["uids"] = uids
print(json.dumps(report))
