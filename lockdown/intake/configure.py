"""The configure step `lockdown init` writes: lockdown/intake/php/configure.php with a SPEC
naming the app's configuration file, its format and the keys that take lockdown's values, per
framework (each in its own configuration format). For a generic app the file and its keys are
found by their names (`--config FILE` names the file); when none is found, the script is
written to fail with what to fill in."""
from __future__ import annotations

import json
import re
from pathlib import Path

from ..errors import LockdownError

TEMPLATE = Path(__file__).with_name("php") / "configure.php"

SPECS = {
    # WP_HOME and WP_SITEURL win over the siteurl and home the database holds; wp-cron's
    # loopback request and the auto-updater stay off under load, as the built-in target has them
    "wordpress": {"format": "php-define",
                  "keys": {"DB_NAME": "name", "DB_USER": "user", "DB_PASSWORD": "password", "DB_HOST": "host_port",
                           "WP_HOME": "base_url", "WP_SITEURL": "base_url"},
                  "append_defines": {"DISABLE_WP_CRON": True, "AUTOMATIC_UPDATER_DISABLED": True}},
    "mediawiki": {"format": "php-var",
                  "keys": {"wgDBserver": "host_port", "wgDBname": "name", "wgDBuser": "user",
                           "wgDBpassword": "password", "wgServer": "base_url"}},
    # Drupal 7 and 8+: $databases['default']['default'], whatever the file set before
    "drupal": {"format": "php-array", "keys": {},
               "append": ["$databases['default']['default'] = array_merge($databases['default']['default'] ?? [], "
                          "['driver' => 'mysql', 'database' => {name}, 'username' => {user}, 'password' => {password}, "
                          "'host' => {host}, 'port' => {port}]);",
                          "$base_url = {base_url};"]},
    # a cached configuration (php artisan config:cache) would win over .env; so would a
    # connection URL (config/database.php's 'url' => env('DATABASE_URL'), DB_URL from Laravel 11):
    # set where the file sets one, and never added (the app's config may not read it)
    "laravel": {"format": "env",
                "keys": {"DB_HOST": "host", "DB_PORT": "port", "DB_DATABASE": "name",
                         "DB_USERNAME": "user", "DB_PASSWORD": "password", "DB_SOCKET": "socket",
                         "APP_URL": "base_url"},
                "replace": {"DATABASE_URL": "database_url", "DB_URL": "database_url"},
                "remove": ["bootstrap/cache/config.php"]},
    # .env.local wins over .env (Symfony's Dotenv)
    "symfony": {"format": "env", "keys": {"DATABASE_URL": "database_url", "DEFAULT_URI": "base_url"}},
}

# a generic app's keys by what they are called, in any of the formats
_KINDS = (("password", r"(db_?)?(pass|passwd|password|pwd)"), ("user", r"(db_?)?(user|username|login)"),
          ("name", r"(db_?)?(name|dbname|database|schema)"), ("host", r"(db_?)?(host|hostname|server)"),
          ("port", r"(db_?)?port"), ("socket", r"(db_?)?(socket|unix_socket)"))
_FORMS = {"php-define": r"""define\s*\(\s*['"](?P<key>\w+)['"]\s*,""",
          "php-var": r"""\$(?P<key>\w+)\s*=\s*['"0-9]""",
          "php-array": r"""['"](?P<key>\w+)['"]\s*=>\s*['"0-9]""",
          "env": r"""^\s*(?:export\s+)?(?P<key>[A-Za-z_]\w*)\s*=""" }
CANDIDATES = ("config.php", "dbconf.php", "db.php", "database.php", "settings.php", "config/database.php",
              "config/config.php", "config/db.php", "inc/config.php", "includes/config.php", "app/config.php",
              ".env")


def generic_spec(app: Path, config: str | None) -> dict | None:
    """The SPEC for the first candidate file (or `config`) that sets a database's keys: at
    least a host or a name and a user, by name, in one format."""
    files = [config] if config else list(CANDIDATES)
    for rel in files:
        path = app / rel
        if not path.is_file():
            if config:
                raise LockdownError(f"--config {config}: no such file in {app}")
            continue
        text = path.read_text(errors="replace")
        for form, rx in _FORMS.items():
            keys = {}
            for m in re.finditer(rx, text, re.M):
                kind = _kind(m["key"])
                if kind and m["key"] not in keys:
                    keys[m["key"]] = kind
            if "user" in keys.values() and ({"host", "name"} & set(keys.values())):
                return {"format": form, "file": rel, "keys": keys}
    return None


def _kind(key: str) -> str | None:
    for kind, rx in _KINDS:
        if re.fullmatch(rx, key, re.I):
            return kind
    return None


def app_paths(app: Path) -> list[str]:
    """The app directory as a configuration file may name it: as given, and resolved."""
    return sorted({str(app.absolute()), str(app.resolve())}, key=len, reverse=True)


def spec_for(framework: str, app: Path, config_file: str | None, url_suffix: str = "") -> dict | None:
    spec = _spec_for(framework, app, config_file, url_suffix)
    if spec is not None:
        spec["app_paths"] = app_paths(app)
    return spec


def _spec_for(framework: str, app: Path, config_file: str | None, url_suffix: str) -> dict | None:
    if framework == "generic":
        return generic_spec(app, config_file)
    spec = {k: v for k, v in SPECS[framework].items() if k != "append_defines"}
    spec["file"] = config_file
    if framework == "symfony":
        spec["url_suffix"] = url_suffix
    for key, value in SPECS[framework].get("append_defines", {}).items():
        spec.setdefault("defines", {})[key] = value
    return spec


def configure_script(spec: dict | None) -> str:
    """configure.php's text: the template with SPEC, or, with no SPEC, a script that stops the
    run with what to fill in."""
    if spec is None:
        return ("<?php\n// Generated by `lockdown init`: your app's database settings were not found.\n"
                "// Write LOCKDOWN_DB_HOST, LOCKDOWN_DB_PORT, LOCKDOWN_DB_NAME, LOCKDOWN_DB_USER and\n"
                "// LOCKDOWN_DB_PASSWORD (getenv) into the copy of your configuration file under\n"
                "// getenv('LOCKDOWN_APP_DIR'): write a new file and rename() it over (see docs/init.md),\n"
                "// or run `lockdown init` again with --config FILE.\n"
                "fwrite(STDERR, \"configure.php: fill in this script (docs/init.md)\\n\");\nexit(1);\n")
    text = json.dumps(spec, sort_keys=True).replace("\\", "\\\\").replace("'", "\\'")
    return TEMPLATE.read_text().replace("'@SPEC@'", f"'{text}'", 1)
