"""`lockdown init` from Python: an existing site made into a target directory.

Read-only on the user's side: the app directory is only listed and read (the target names it
as `[app] source`; each run copies it), the database is read once by a dump, the logs are read.
Written: the target directory (-o) with target.toml, seed.sql (the dump, as dumped: caches
included, as production serves them), configure.php (lockdown/intake/configure.py); with
--no-db, target.toml alone. The paths the app writes in place (owned by a web server's account
in the user's site, or by all; a framework's usual places) go to `writable`. The home
page is then fetched once from lockdown's own stack, for the sanity string and, without a log,
the pages it links to.
"""
from __future__ import annotations

import datetime
import html
import os
import re
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from .. import paths
from ..errors import LockdownError
from ..harness.prepare import cache_key, keep_preparation
from ..harness.stack import Stack, StackOptions
from ..targets import toml_out
from ..targets.config import load_target
from . import access_log, configure, detect, dump

HOME_LINKS = 10          # pages linked from the home page, without a log
FETCH_TIMEOUT_S = 60


@dataclass
class InitOptions:
    app: Path
    out: Path
    dsn: str | None = None
    dump_file: Path | None = None
    no_db: bool = False              # the app has no database (files only)
    access_logs: list = field(default_factory=list)
    framework: str | None = None
    config: str | None = None        # a generic app's configuration file, relative to the app


@dataclass
class InitResult:
    target: Path
    detected: detect.Detected
    urls: list                       # [(path, weight, count or None)]
    log_counts: access_log.LogCounts | None
    sanity: str
    configured: bool                 # False: configure.php is to be filled in


def target_name(out: Path) -> str:
    name = re.sub(r"[^A-Za-z0-9_-]+", "-", out.name).strip("-_")[:55] or "site"
    return name


def check(options: InitOptions) -> None:
    if not options.app.is_dir():
        raise LockdownError(f"--app {options.app}: no such directory")
    if sum((options.dsn is not None, options.dump_file is not None, options.no_db)) != 1:
        raise LockdownError("give the database with --db DSN (dumped once, read-only) or --db-dump FILE, "
                            "or --no-db for an app without one")
    if options.out.exists() and any(options.out.iterdir()):
        raise LockdownError(f"-o {options.out} is not empty: give a new directory for the target")
    app, out = options.app.resolve(), options.out.resolve()
    if out == app or app in out.parents:
        raise LockdownError(f"-o {options.out} is inside --app {options.app}: the user's files are never "
                            f"written; give a directory elsewhere")
    for log in options.access_logs:
        if not Path(log).is_file():
            raise LockdownError(f"--access-log {log}: no such file")


def docroot_files(app: Path, docroot: str) -> frozenset:
    """The docroot's files that are not PHP (static files a log's requests may name), relative."""
    root = app / docroot
    out = set()
    for p in root.rglob("*"):
        if p.is_file() and p.suffix != ".php" and len(out) < 200_000:
            out.add(p.relative_to(root).as_posix())
    return frozenset(out)


def count_logs(logs: list, files: frozenset) -> access_log.LogCounts:
    counts = access_log.LogCounts()
    for log in logs:
        with open(log, encoding="utf-8", errors="replace") as f:
            access_log.count(f, files, counts)
    return counts


# Accounts web servers and PHP pools run as: what they own in a site is what the app writes
WEB_ACCOUNTS = ("www-data", "nginx", "apache", "http", "_www", "wwwrun", "nobody")
# ... and where frameworks keep what they write, when the site's owners do not tell
FRAMEWORK_WRITABLE = {"wordpress": ("wp-content/uploads", "wp-content/cache"), "drupal": ("sites/default/files",),
                      "mediawiki": ("images", "cache"), "laravel": ("storage", "bootstrap/cache"),
                      "symfony": ("var",)}
MAX_WALK = 200_000


def writable_paths(app: Path, framework: str) -> list[str]:
    """The directories and files of the user's site its app writes in place (target.toml's
    `writable`: each run gets its own copy, docs/targets.md): those a web server account owns
    (WEB_ACCOUNTS), or writable by all; then the framework's usual places that exist. The
    topmost of each branch only."""
    import pwd
    web = set()
    for name in WEB_ACCOUNTS:
        try:
            web.add(pwd.getpwnam(name).pw_uid)
        except KeyError:
            pass
    found: list[str] = []
    seen = 0
    for root, dirs, files in os.walk(app):
        dirs.sort()
        rel_root = Path(root).relative_to(app).as_posix()
        for name in dirs + sorted(files):
            seen += 1
            p = Path(root, name)
            try:
                st = p.lstat()
            except OSError:
                continue
            if not p.is_symlink() and (st.st_uid in web or st.st_mode & 0o002):
                found.append(name if rel_root == "." else f"{rel_root}/{name}")
        dirs[:] = [d for d in dirs if (d if rel_root == "." else f"{rel_root}/{d}") not in found and d != ".git"]
        if seen > MAX_WALK:
            break
    found += [rel for rel in FRAMEWORK_WRITABLE.get(framework, ()) if (app / rel).exists()]
    top = sorted(set(found))
    return [p for p in top if not any(p.startswith(q + "/") for q in top if q != p)]


def target_document(name: str, options: InitOptions, found: detect.Detected, urls: list,
                    sanity: tuple[str, str], writable: list[str] | None = None) -> dict:
    today = datetime.date.today().isoformat()
    return {
        "name": name,
        "description": f"{found.framework} site from {options.app.resolve()} (lockdown init, {today})",
        "docroot": found.docroot, "front_controller": "index.php",
        **({"writable": writable} if writable else {}),
        "app": {"source": str(options.app.resolve()),
                **({"exclude": [".git"]} if (options.app / ".git").exists() else {})},
        **({} if options.no_db else {"database": {"seed": "seed.sql"},
                                      "configure": {"command": ["php", "configure.php"]}}),
        "urls": [{"path": p, "weight": w} for p, w, _ in urls],
        "sanity": {"url": sanity[0], "expect": sanity[1]},
    }


def write_toml(directory: Path, document: dict) -> None:
    (directory / "target.toml").write_text(
        "# Written by `lockdown init` (docs/init.md); edit freely: URLs, weights, the sanity text.\n"
        + toml_out.dumps(document))


def init(options: InitOptions, say=print) -> InitResult:
    check(options)
    app = options.app.resolve()
    found = detect.detect(app, options.framework)
    say(f"[init] {found.why}; docroot {found.docroot}")
    counts = None
    urls = [("/", 1, None)]
    if options.access_logs:
        counts = count_logs(options.access_logs, docroot_files(app, found.docroot))
        urls = access_log.weighted(counts.pages) or urls
        say(f"[init] access logs: {counts.lines} lines, {sum(counts.pages.values())} page views of "
            f"{len(counts.pages)} URLs; {counts.static} static, {counts.other} other, {counts.unreadable} unreadable")
    out = paths.make_dir(options.out, "-o")
    writable = writable_paths(app, found.framework)
    if writable:
        say(f"[init] written in place by the app (each run gets its own copy): {', '.join(writable[:8])}"
            + (" ..." if len(writable) > 8 else ""))
    spec = None
    if not options.no_db:
        spec = configure.spec_for(found.framework, app, options.config or found.config)
        (out / "configure.php").write_text(configure.configure_script(spec))
    if options.dsn:
        say(f"[init] dumping {dump.dsn_database(options.dsn)} (mariadb-dump --single-transaction, read-only)")
        dump.dump(options.dsn, out / "seed.sql")
    elif options.dump_file:
        dump.copy_dump(options.dump_file, out / "seed.sql")
    name = target_name(out)
    write_toml(out, target_document(name, options, found, urls, ("/", "(checked below)"), writable))
    sanity, linked = ("/", ""), []
    if spec is not None or options.no_db:
        first_key = cache_key(load_target(out))
        sanity, linked = home_page(out, not options.access_logs, say)
        if not options.access_logs:          # the home page (where `/` leads) and its links
            urls = [(sanity[0], 3 if linked else 1, None)] + [(p, 1, None) for p in linked if p != sanity[0]]
        write_toml(out, target_document(name, options, found, urls, sanity, writable))
        keep_preparation(load_target(out), first_key)
    return InitResult(out, found, urls, counts, sanity[1], spec is not None or options.no_db)


def home_page(target_dir: Path, want_links: bool, say) -> tuple[tuple[str, str], list[str]]:
    """Serve the new target once: ((the home page's path, followed if `/` redirects, its sanity
    string), and, when asked, the pages it links to that answer 200)."""
    target = load_target(target_dir)
    run_dir = paths.new_run_dir(target.name, "init")
    with Stack(target, run_dir, StackOptions(workers=2), say=say) as stack:
        home, (status, body) = "/", fetch(stack.base_url + "/")
        if 300 <= status < 400 and (moved := same_site(body, stack.base_url)):
            home, (status, body) = moved, fetch(stack.base_url + moved)     # the sanity URL may not redirect
        if status != 200:
            raise LockdownError(f"the home page answered {status} on lockdown's copy; see {run_dir / 'logs'} "
                                f"(configure: {run_dir / 'logs' / 'configure.log'})")
        sanity = (home, sanity_string(body))
        linked = []
        if want_links:
            for path in links(body, stack.base_url)[:HOME_LINKS * 3]:
                if len(linked) < HOME_LINKS and fetch(stack.base_url + path)[0] == 200:
                    linked.append(path)
    say(f"[init] home page {home}: sanity text {sanity[1]!r}" + (f", {len(linked)} linked pages" if want_links else ""))
    return sanity, linked


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):
        return None


def fetch(url: str) -> tuple[int, str]:
    """(status, body) of one GET, redirects not followed (a redirect's body is its Location)."""
    opener = urllib.request.build_opener(_NoRedirect)
    try:
        with opener.open(url, timeout=FETCH_TIMEOUT_S) as r:
            return r.status, r.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as e:
        return e.code, (e.headers.get("Location") or "") if 300 <= e.code < 400 else ""
    except (urllib.error.URLError, OSError) as e:
        raise LockdownError(f"cannot fetch {url} from lockdown's copy: {e}")


def sanity_string(body: str) -> str:
    """A piece of the page's title (else its first heading) as it stands in the HTML: the
    longest run between markup and character references, at least 4 characters."""
    for rx in (r"<title[^>]*>(.*?)</title>", r"<h1[^>]*>(.*?)</h1>"):
        m = re.search(rx, body, re.S | re.I)
        if m:
            parts = [p.strip() for p in re.split(r"<[^>]*>|&[#\w]+;|[\r\n\t]", m.group(1))]
            best = max(parts, key=len, default="")
            if len(best) >= 4:
                return best
    raise LockdownError("the home page has no title or heading to check it by; write [sanity] expect "
                        "into target.toml (text the home page always holds)")


def same_site(href: str, base_url: str) -> str | None:
    """`href` as a path with its query when it is on the site at `base_url`, else None."""
    u = urllib.parse.urlsplit(urllib.parse.urljoin(base_url + "/", html.unescape(href)))
    if u.scheme not in ("http", "https") or u.netloc != urllib.parse.urlsplit(base_url).netloc:
        return None
    return (u.path or "/") + (f"?{u.query}" if u.query else "")


def links(body: str, base_url: str) -> list[str]:
    """Same-site links of a page, as paths with their query, static files and fragments left out."""
    out = []
    for href in re.findall(r"""<a\s[^>]*?href\s*=\s*["']([^"'#]+)""", body, re.I):
        path = same_site(href, base_url)
        if path and path != "/" and path not in out and not access_log.is_static(path):
            out.append(path)
    return out
