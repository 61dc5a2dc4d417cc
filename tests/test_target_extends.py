"""`extends` in target.toml (a variant as its target.toml plus the files it overrides), the one
rule between target and database names, and the TOML writer they use."""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import tomllib
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from conftest import HELLO, REPO, lockdown_argv, processes_mentioning, wait_for_line
from lockdown.errors import LockdownError
from lockdown.targets import toml_out
from lockdown.targets.config import database_name, load_target, users_server_database

APPS = REPO / "fixtures" / "apps"


@pytest.fixture
def lockdown_home(tmp_path, monkeypatch) -> Path:
    home = tmp_path / "home"
    monkeypatch.setenv("LOCKDOWN_HOME", str(home))
    return home


def base_target(root: Path) -> Path:
    base = root / "base"
    shutil.copytree(HELLO, base)
    (base / "app" / "config.php").write_text("<?php return ['greeting' => 'base'];\n")
    (base / "configure.sh").write_text("#!/bin/sh\nexit 0\n")
    (base / "target.toml").write_text(
        'name = "base"\ndescription = "the base"\npatchable = ["config.php"]\nphp_ini = { "memory_limit" = "64M" }\n'
        '[app]\nfiles = "app"\n[configure]\ncommand = ["sh", "configure.sh"]\n'
        '[[urls]]\npath = "/"\nweight = 3\n[[urls]]\npath = "/b"\n[sanity]\nurl = "/"\nexpect = "Hello"\n')
    return base


def variant(root: Path, name: str, toml: str, files: dict[str, str] | None = None) -> Path:
    d = root / name
    d.mkdir()
    (d / "target.toml").write_text(toml)
    for rel, text in (files or {}).items():
        (d / rel).parent.mkdir(parents=True, exist_ok=True)
        (d / rel).write_text(text)
    return d


def test_variant_is_its_base_with_the_one_file_it_overrides(tmp_path, lockdown_home):
    base = base_target(tmp_path)
    v = variant(tmp_path, "base-clean", 'extends = "../base"\n',
                {"app/config.php": "<?php return ['greeting' => 'clean'];\n"})
    t, b = load_target(v), load_target(base)
    assert t.name == "base-clean"                       # not inherited: the variant's directory's
    assert t.sources == (v.resolve(), base.resolve())
    assert lockdown_home in t.directory.parents
    assert (t.app_files / "config.php").read_text() == "<?php return ['greeting' => 'clean'];\n"
    assert (t.app_files / "index.php").read_bytes() == (b.app_files / "index.php").read_bytes()
    assert (t.directory / "configure.sh").read_bytes() == (base / "configure.sh").read_bytes()
    assert t.configure == b.configure and t.urls == b.urls and t.php_ini == b.php_ini
    assert (t.description, t.patchable, t.sanity_url, t.sanity_expect) == \
        (b.description, b.patchable, b.sanity_url, b.sanity_expect)
    # the merged directory holds the base's files and the override, nothing else
    listed = sorted(p.relative_to(t.directory).as_posix() for p in t.directory.rglob("*") if p.is_file())
    assert listed == sorted(p.relative_to(base).as_posix() for p in base.rglob("*") if p.is_file())


def test_variant_keys_replace_the_bases_and_tables_merge_key_by_key(tmp_path, lockdown_home):
    base_target(tmp_path)
    v = variant(tmp_path, "v", 'extends = "../base"\nname = "tuned"\nphp_ini = { "opcache.enable" = 0 }\n'
                               '[sanity]\nexpect = "Hello from"\n[[urls]]\npath = "/only"\nweight = 2\n')
    t = load_target(v)
    assert t.name == "tuned"
    assert [(u.path, u.weight) for u in t.urls] == [("/only", 2)]          # an array: replaced whole
    assert (t.sanity_url, t.sanity_expect) == ("/", "Hello from")          # a table: key by key
    assert t.php_ini == {"memory_limit": "64M", "opcache.enable": "0"}


def test_a_chain_of_bases_and_a_relative_app_source(tmp_path, lockdown_home):
    base = base_target(tmp_path)
    toml = (base / "target.toml").read_text().replace('files = "app"', 'source = "app"')
    (base / "target.toml").write_text(toml)
    variant(tmp_path, "mid", 'extends = "../base"\n', {"extra.sql": "SELECT 1;\n"})
    t = load_target(variant(tmp_path, "top", 'extends = "../mid"\n', {"extra.sql": "SELECT 2;\n"}))
    assert t.app_source == (base / "app").resolve()                 # relative to the base, made absolute
    assert (t.directory / "extra.sql").read_text() == "SELECT 2;\n"
    assert [d.name for d in t.sources] == ["top", "mid", "base"]


def test_same_content_same_merged_directory_and_a_changed_override_a_new_one(tmp_path, lockdown_home):
    base_target(tmp_path)
    v = variant(tmp_path, "v", 'extends = "../base"\n', {"app/config.php": "<?php return [];\n"})
    first = load_target(v).directory
    assert load_target(v).directory == first
    (v / "app" / "config.php").write_text("<?php return [1];\n")
    second = load_target(v).directory
    assert second != first and (second / "app" / "config.php").read_text() == "<?php return [1];\n"


@pytest.mark.parametrize("toml, message", [
    ('extends = "../nowhere"\n',
     r"target\.toml: extends '\.\./nowhere': no target at .*/nowhere \(no target\.toml there\)"),
    ('extends = 3\n', r"`extends` must be a string"),
    ('extends = "../base"\nbogus = 1\n', r"unknown key `bogus`"),
])
def test_a_bad_extends_is_one_line(tmp_path, lockdown_home, toml, message):
    base_target(tmp_path)
    with pytest.raises(LockdownError) as e:
        load_target(variant(tmp_path, "v", toml))
    assert "\n" not in str(e.value) and re.search(message, str(e.value)), str(e.value)
    assert str(tmp_path / "v" / "target.toml") in str(e.value)


def test_a_loop_of_extends_is_refused_in_one_line(tmp_path, lockdown_home):
    variant(tmp_path, "a", 'extends = "../b"\n')
    variant(tmp_path, "b", 'extends = "../a"\n')
    with pytest.raises(LockdownError) as e:
        load_target(tmp_path / "a")
    assert "\n" not in str(e.value)
    assert f"extends makes a loop ({tmp_path / 'a'} -> {tmp_path / 'b'} -> {tmp_path / 'a'})" in str(e.value)
    assert not (lockdown_home / "targets").exists()


def test_an_error_in_the_merged_file_names_the_variants_file(tmp_path, lockdown_home):
    base_target(tmp_path)
    with pytest.raises(LockdownError) as e:
        load_target(variant(tmp_path, "v", 'extends = "../base"\ndocroot = "../../etc"\n'))
    assert str(e.value).startswith(f"bad target file {tmp_path / 'v' / 'target.toml'} (merged: ")
    assert "docroot '../../etc' leads out of the app tree" in str(e.value)


def test_database_name_is_derived_from_the_targets_by_one_rule(tmp_path):
    d = tmp_path / "my-shop"
    shutil.copytree(HELLO, d)
    toml = '[app]\nfiles = "app"\n[database]\n[[urls]]\npath = "/"\n[sanity]\nexpect = "x"\n'
    (d / "target.toml").write_text(toml)
    t = load_target(d)
    assert (t.name, t.database) == ("my-shop", "my_shop")
    assert users_server_database(t.name) == "lockdown_my_shop"
    assert database_name("a-b_c-1") == "a_b_c_1"
    (d / "target.toml").write_text(toml.replace("[database]\n", '[database]\nname = "shop_db"\n'))
    assert load_target(d).database == "shop_db"                  # a name given is kept


@pytest.mark.parametrize("doc", [
    {"name": "x", "n": 3, "f": 1.5, "b": True, "l": ["a", 'q"uote', "back\\slash", "nl\nx\t\x7f"],
     "php_ini": {"opcache.enable": 0, "memory_limit": "64M"},
     "app": {"source": "/usr/share/é"}, "urls": [{"path": "/?a=1&b=2", "weight": 4}, {"path": "/b"}]},
    {"only": {"nested": {"a": [1, 2]}}},
])
def test_toml_writer_round_trips(doc):
    assert tomllib.loads(toml_out.dumps(doc)) == doc


@pytest.mark.server
def test_catalog_with_clean_config_as_a_variant_serves_what_catalog_clean_does(env, tmp_path):
    """A variant of catalog holding only catalog-clean's app/config.php: every page and its
    ground truth the same as catalog-clean's (which shares catalog's files by per-file links)."""
    v = tmp_path / "catalog-v"
    v.mkdir()
    (v / "target.toml").write_text(f'extends = "{os.path.relpath(APPS / "catalog", v)}"\n')
    (v / "app").mkdir()
    shutil.copyfile(APPS / "catalog-clean" / "app" / "config.php", v / "app" / "config.php")
    pages = ["/", "/products", "/product?id=7", "/search?q=oak"]
    seen = {name: _served_pages(env, tmp_path / name, target, pages)
            for name, target in (("variant", v), ("clean", "catalog-clean"))}
    assert seen["variant"] == seen["clean"]
    assert all(p["status"] == 200 and p["truth"] for p in seen["variant"].values())


TRAILER = re.compile(r"<!-- catalog-truth (.*?) -->\n\Z")


def _served_pages(env, run_dir: Path, target, pages: list[str]) -> dict:
    proc = subprocess.Popen(lockdown_argv("serve", target, "--run-dir", run_dir, "--workers", "1"),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=REPO)
    try:
        out = wait_for_line(proc, "run directory:", timeout=600)
        url = next(line for line in out.splitlines() if line.startswith("serving ")).split()[1].rstrip("/")
        got = {}
        for path in pages:
            with urllib.request.urlopen(url + path, timeout=60) as r:
                body = r.read().decode()
                got[path] = {"status": r.status, "truth": json.loads(r.headers["X-Catalog-Truth"]),
                             "body": TRAILER.sub("", body).replace(url, "URL")}
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0 and processes_mentioning(str(run_dir)) == []
    return got
