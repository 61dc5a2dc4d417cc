"""An N+1 whose per-row query no app code holds: an ORM sends it when a loop reads a relation
the query before it did not load (Eloquent: `$post->author`). The relation is found by the
call graph (analyzers/sql_caller.lazy_relations_by_count: the lazy loader called it as many
times as the query was sent), and the model loads it by default (remediation/php/eager_load.php:
Eloquent's `$with`). Pure parts here; laravel on the real stack in test_sender_by_count.py."""
from __future__ import annotations

from lockdown.analyzers.findings import Finding
from lockdown.analyzers.sql_caller import lazy_relations_by_count
from lockdown.remediation import generate

SHAPE = "select * from `users` where `users`.`id` = ? limit ?"
LOADER = "Illuminate\\Database\\Eloquent\\Model::getRelationshipFromMethod"


def test_the_relation_the_lazy_loader_called_once_per_query():
    sent = {SHAPE: {"r1": 30, "r2": 30, "r3": 0}}
    edges = {rid: {(LOADER, "App\\Models\\Post::author"): {"ct": n},
                   (LOADER, "App\\Models\\Comment::post"): {"ct": 2},
                   (LOADER, "Illuminate\\Database\\Eloquent\\Relations\\BelongsTo::getResults"): {"ct": n},
                   (LOADER, "tap"): {"ct": n},
                   ("main()", "App\\Models\\Post::author"): {"ct": 1}}
             for rid, n in (("r1", 30), ("r2", 30), ("r3", 0))}
    # the ORM's own machinery and helper functions beside the relation are not relations
    assert lazy_relations_by_count(sent, edges) == {SHAPE: ["App\\Models\\Post::author"]}
    edges["r2"][(LOADER, "App\\Models\\Post::author")]["ct"] = 29      # one row loaded some other way
    assert lazy_relations_by_count(sent, edges) == {}
    assert lazy_relations_by_count(sent, {"r1": {("main()", "App\\Models\\Post::author"): {"ct": 30}}}) == {}


POST = """<?php

namespace App\\Models;

use Illuminate\\Database\\Eloquent\\Model;

class Post extends Model
{
    protected $casts = ['published_at' => 'datetime'];

    public function author()
    {
        return $this->belongsTo(User::class, 'user_id');
    }
}
"""


def _app(tmp_path, post: str, base: str | None = None):
    app = tmp_path / "app"
    (app / "app/Models").mkdir(parents=True)
    (app / "app/Models/Post.php").write_text(post)
    if base is not None:
        (app / "app/Models/Base.php").write_text(base)
    return app


def _finding() -> Finding:
    return Finding("n-plus-one", "N+1", "high", 12.0, "s",
                   details={"fingerprint": SHAPE, "key_columns": ["id"],
                            "batched_example": "select * from `users` where `users`.`id` IN (5, 11)",
                            "parent": {"example": "select * from `posts` order by `published_at` desc limit 30"}})


def _called():
    return generate.Called({}, {}, {SHAPE: ["App\\Models\\Post::author"]})


def test_the_model_loads_the_relation_by_default(tmp_path):
    app = _app(tmp_path, POST)
    f = _finding()
    (r,) = generate.propose(f, ["app/*.php"], app, _called())
    assert (r.kind, r.origin, r.file) == ("diff", "generated", "app/Models/Post.php")
    assert "+    protected $with = ['author'];" in r.content and "passes php -l" in r.checked
    assert "`->with('author')`" in r.description and "select * from `posts` order by" in r.description
    assert "IN (5, 11)" in r.description and f.details["lazy_relation"] == "App\\Models\\Post::author"
    assert "no_patch" not in f.details and f.details["located"] == "app/Models/Post.php:11"


def test_a_with_the_model_declares_gains_the_relation(tmp_path):
    app = _app(tmp_path, POST.replace("    protected $casts", "    protected $with = array('comments');\n"
                                                             "    protected $casts"))
    (r,) = generate.propose(_finding(), ["app/*.php"], app, _called())
    assert "+    protected $with = array('author', 'comments');" in r.content
    assert "adds it to the `$with` it declares" in r.description


def test_no_diff_where_it_would_be_wrong_and_where_is_said(tmp_path):
    # already eager-loaded by default: nothing to add
    app = _app(tmp_path, POST.replace("    protected $casts",
                                      "    protected $with = ['author'];\n    protected $casts"))
    f = _finding()
    assert generate.propose(f, ["app/*.php"], app, _called()) == []
    assert "already names 'author'" in f.details["no_patch"] and "app/Models/Post.php:12" in f.details["no_patch"]
    assert "`->with('author')`" in f.details["no_patch"]
    # a parent class of the app's own may declare $with, which a declaration here would replace
    app = _app(tmp_path / "b", POST.replace("extends Model", "extends Base"),
               "<?php\nnamespace App\\Models;\nabstract class Base extends \\Illuminate\\Database\\Eloquent\\Model\n"
               "{\n    protected $with = ['tags'];\n}\n")
    f = _finding()
    assert generate.propose(f, ["app/*.php"], app, _called()) == []
    assert "extends Base, a class of the app's own" in f.details["no_patch"]
    # outside patchable
    f = _finding()
    assert generate.propose(f, ["lib/*.php"], _app(tmp_path / "c", POST), _called()) == []
    assert "not one of the target's patchable files" in f.details["no_patch"]
    # two relations loaded as often: which one the loop reads is not known
    f = _finding()
    two = generate.Called({}, {}, {SHAPE: ["App\\Models\\Post::author", "App\\Models\\Post::editor"]})
    assert generate.propose(f, ["app/*.php"], _app(tmp_path / "d", POST), two) == []
    assert "one of App\\Models\\Post::author, App\\Models\\Post::editor" in f.details["no_patch"]


def test_lookups_outside_the_app_say_where_the_fix_belongs(tmp_path):
    app = _app(tmp_path, POST)
    f = Finding("failed-lookups", "t", "low", 0.7, "s",
                details={"function": "main()", "builtins": ["file_exists", "stream_resolve_include_path"],
                         "estimated": True})
    assert generate.propose(f, ["app/*.php"], app, {}) == []
    told = f.details["no_patch"]
    assert "top-level code of files (main())" in told and "list that directory first in include_path" in told
    assert "is an estimate" in told
    f = Finding("failed-lookups", "t", "low", 0.2, "s",
                details={"function": "Illuminate\\Filesystem\\Filesystem::lastModified", "builtins": ["filemtime"]})
    assert generate.propose(f, ["app/*.php"], app, {}) == []
    assert "is not defined in the app's files: it is a library or the framework as installed" in \
        f.details["no_patch"] and "entry by entry" not in f.details["no_patch"]


def _files(tmp_path, files: dict[str, str]):
    app = tmp_path / "app"
    for rel, text in files.items():
        (app / rel).parent.mkdir(parents=True, exist_ok=True)
        (app / rel).write_text(text)
    return app


USER = """<?php
namespace App\\Models;
class User extends \\Illuminate\\Database\\Eloquent\\Model { }
"""


def test_what_the_models_file_alone_does_not_tell(tmp_path):
    """An outside review's cases: a trait of the app's that declares $with (a fatal clash), a
    relation of a model to itself (loading the whole chain), a related model loading relations
    by default (loading this one back), a parent imported under an alias."""
    cases = {
        "trait": ({"app/Models/Post.php": POST.replace("{\n    protected $casts", "{\n    use HasTags;\n"
                                                                                    "    protected $casts"),
                   "app/Models/HasTags.php": "<?php\nnamespace App\\Models;\ntrait HasTags\n{\n"
                                             "    protected $with = ['tags'];\n}\n"},
                  "uses the trait HasTags, which declares `$with` too"),
        "itself": ({"app/Models/Post.php": POST.replace("belongsTo(User::class", "belongsTo(self::class")},
                   "relates the model to itself"),
        "back": ({"app/Models/Post.php": POST,
                  "app/Models/User.php": USER.replace("{ }", "{ protected $with = ['posts']; }")},
                 "the related model User loads relations by default itself"),
        "alias": ({"app/Models/Post.php": POST.replace("use Illuminate\\Database\\Eloquent\\Model;",
                                                       "use App\\Models\\Base as Model;"),
                   "app/Models/Base.php": "<?php\nnamespace App\\Models;\n#[\\AllowDynamicProperties] abstract "
                                          "class Base extends \\Illuminate\\Database\\Eloquent\\Model { }\n"},
                  "Post extends App\\Models\\Base, a class of the app's own"),
    }
    for name, (files, told) in cases.items():
        f = _finding()
        assert generate.propose(f, ["app/*.php"], _files(tmp_path / name, files), _called()) == [], name
        assert told in f.details["no_patch"], (name, f.details["no_patch"])


def test_lookalikes_in_the_models_file_are_not_its_with(tmp_path):
    """A method parameter named $with, an anonymous class and a `::class` before the relation,
    a framework parent whose last segment names one of the app's models: the property is still
    declared, once, and the file still parses."""
    post = POST.replace("    protected $casts = ['published_at' => 'datetime'];\n", """\
    protected $casts = ['published_at' => 'datetime'];

    public function scopeLoaded($query, array $with = [])
    {
        $probe = new class { public $with = 1; };
        return $query->with($with)->where('kind', Post::class);
    }
""").replace("use Illuminate\\Database\\Eloquent\\Model;", "use Illuminate\\Foundation\\Auth\\User as Model;")
    app = _files(tmp_path, {"app/Models/Post.php": post, "app/Models/User.php": USER})
    (r,) = generate.propose(_finding(), ["app/*.php"], app, _called())
    added = [ln for ln in r.content.splitlines() if ln.startswith("+") and not ln.startswith("+++")]
    assert added == ["+    protected $with = ['author'];", "+"], r.content     # the property and a blank line
