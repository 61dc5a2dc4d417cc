"""Which framework an app directory holds, from its files alone, and where its docroot is.

Order matters: a Drupal or WordPress tree may carry a `.env` or a `bin/console` of a tool, so
the specific markers are tried first: WordPress (`wp-config.php`), Drupal 7 and later
(`sites/*/settings.php` beside Drupal's own code), MediaWiki (`LocalSettings.php`), Laravel
(`artisan` and `.env`), Symfony (`bin/console` and `.env`), and otherwise a generic PHP app,
whose docroot is the first of `.`, `public`, `web` holding an `index.php`.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..errors import LockdownError

FRAMEWORKS = ("wordpress", "drupal", "mediawiki", "laravel", "symfony", "generic")


@dataclass(frozen=True)
class Detected:
    framework: str
    docroot: str                # relative to the app directory
    config: str | None          # the app's configuration file the configure step rewrites
    why: str                    # what was found, for the user


def _drupal(app: Path) -> Detected | None:
    """Drupal 7 (includes/bootstrap.inc) or 8 and later (core/lib/Drupal.php), the docroot
    itself or a composer project's `web/`."""
    for root in (".", "web", "docroot"):
        base = app / root
        code = (base / "includes" / "bootstrap.inc").is_file() or (base / "core" / "lib" / "Drupal.php").is_file()
        settings = sorted(base.glob("sites/*/settings.php"))
        if code and settings:
            default = base / "sites" / "default" / "settings.php"
            chosen = default if default in settings else settings[0]
            version = "7" if (base / "includes" / "bootstrap.inc").is_file() else "8+"
            return Detected("drupal", root, chosen.relative_to(app).as_posix(),
                            f"Drupal {version}: {chosen.relative_to(app)}")
    return None


def generic_docroot(app: Path) -> str:
    for root in (".", "public", "web"):
        if (app / root / "index.php").is_file():
            return root
    raise LockdownError(f"no index.php in {app}, {app}/public or {app}/web: give the directory that "
                        f"holds the site's PHP code with --app")


def detect(app: Path, framework: str | None = None) -> Detected:
    """The framework of `app` (or the one given, checked for its configuration file)."""
    found = _detect(app) if framework is None else _named(app, framework)
    if found is None:
        raise LockdownError(f"--framework {framework}: {app} does not look like one (its configuration "
                            f"file is missing); leave --framework out to detect it, or give generic")
    return found


def _detect(app: Path) -> Detected:
    for name in FRAMEWORKS[:-1]:
        found = _named(app, name)
        if found is not None:
            return found
    return _named(app, "generic")


def _named(app: Path, name: str) -> Detected | None:
    if name == "wordpress":
        for root in (".", "wordpress", "wp"):
            if (app / root / "wp-config.php").is_file() and (app / root / "wp-settings.php").is_file():
                return Detected("wordpress", root, f"{root}/wp-config.php".removeprefix("./"),
                                "WordPress: wp-config.php and wp-settings.php")
        return None
    if name == "drupal":
        return _drupal(app)
    if name == "mediawiki":
        if (app / "LocalSettings.php").is_file() and (app / "includes").is_dir():
            return Detected("mediawiki", ".", "LocalSettings.php", "MediaWiki: LocalSettings.php")
        return None
    if name == "laravel":
        if (app / "artisan").is_file() and (app / ".env").is_file() and (app / "public" / "index.php").is_file():
            return Detected("laravel", "public", ".env", "Laravel: artisan and .env")
        return None
    if name == "symfony":
        if ((app / "bin" / "console").is_file() and (app / ".env").is_file()
                and (app / "public" / "index.php").is_file()):
            return Detected("symfony", "public", ".env.local", "Symfony: bin/console and .env")
        return None
    if name == "generic":
        return Detected("generic", generic_docroot(app), None, "a PHP app (no framework recognised)")
    raise LockdownError(f"--framework {name!r} is not one of {', '.join(FRAMEWORKS)}")
