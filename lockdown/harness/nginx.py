"""nginx for a run: a generated config on a loopback port, FastCGI to php-fpm's unix socket."""
from __future__ import annotations

import os
from pathlib import Path

from ..errors import PhaseFailed
from . import ports, service_account
from .logs import evidence
from .processes import Child, ProcessGroup
from .render import render_to
from .toolchain import tool

NGINX_ETC = Path("/etc/nginx")


class Nginx:
    def __init__(self, procs: ProcessGroup, base: Path, port: int, docroot: Path,
                 front_controller: str, fpm_socket: str, instrumented_socket: str | None = None):
        self.procs = procs
        self.base = base
        self.port = port
        self.docroot = docroot
        self.front_controller = front_controller
        self.fpm_socket = fpm_socket
        self.instrumented_socket = instrumented_socket
        self.error_log = procs.run_dir / "logs" / "nginx-error.log"
        self.child: Child | None = None

    def start(self, timeout: float = 20) -> None:
        ports.ensure_free(self.port, "nginx", "--port")
        acct = service_account.account()
        for sub in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"):   # the workers' buffers
            (self.base / "tmp" / sub).mkdir(parents=True, exist_ok=True)
            service_account.give(self.base / "tmp" / sub, acct)
        conf = render_to(
            "nginx.conf.j2", self.base / "nginx.conf", run_dir=self.procs.run_dir,
            prefix=self.base, error_log=self.error_log,
            access_log=self.procs.run_dir / "logs" / "nginx-access.log",
            mime_types=NGINX_ETC / "mime.types", fastcgi_params=NGINX_ETC / "fastcgi_params",
            fpm_socket=self.fpm_socket, instrumented_socket=self.instrumented_socket, port=self.port,
            docroot=self.docroot,
            front_controller=self.front_controller, nginx_workers=min(2, os.cpu_count() or 1))
        argv = [tool("nginx"), "-p", str(self.base), "-c", str(conf), "-e", str(self.error_log)]
        self.child = self.procs.spawn("nginx", argv, log=self.procs.run_dir / "logs" / "nginx.out")
        if not ports.wait_connectable(("127.0.0.1", self.port), timeout, self.child.alive):
            raise PhaseFailed(f"nginx did not start on 127.0.0.1:{self.port}",
                              evidence(self.error_log, self.procs.run_dir / "logs" / "nginx.out"))

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"
