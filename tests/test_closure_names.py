"""Excimer's closure frames joined to xhprof's closure names (lockdown/analyzers/closure_names.py),
on small call graphs written by hand: by the caller, through the builtins Excimer's stacks do not
show, the namespace checked against the file, nested closures, recursion markers, every case
left unjoined, and which joins speak for a frame alone (`sole`) or with frames the graph cannot
tell apart (`same_callers`)."""
from __future__ import annotations

from lockdown.analyzers.closure_names import closure_names, frames_named, join

RUN = "{closure:/usr/share/php/Illuminate/Database/Connection.php(359)}"
WRITE = "{closure:/usr/share/php/Illuminate/Database/Connection.php(480)}"
LARAVEL = "Illuminate\\Database\\Connection::Illuminate\\Database\\{closure}"
CALLBACK = "Illuminate\\Database\\Connection::runQueryCallback"


def test_a_closure_takes_the_one_closure_name_its_caller_calls():
    stacks = [f"public/index.php;{CALLBACK};{RUN}"]
    edges = [(CALLBACK, LARAVEL), (LARAVEL, "PDOStatement::execute"), (CALLBACK, "is_null")]
    assert closure_names(stacks, edges) == {RUN: LARAVEL}
    # a recursion marker on either side is not part of the name
    assert closure_names(stacks, [(CALLBACK + "@1", LARAVEL + "@2")]) == {RUN: LARAVEL}


def test_a_closure_a_builtin_calls_hangs_from_the_builtins_caller():
    """Excimer's stacks hold no builtin frames: the closure array_map runs sits under Cart::total."""
    frame = "{closure:/app/src/Shop/Cart.php(9)}"
    stacks = [f"/app/index.php;Shop\\Cart::total;{frame}"]
    edges = [("Shop\\Cart::total", "array_map"), ("array_map@1", "Shop\\Cart::Shop\\{closure}")]
    assert closure_names(stacks, edges) == {frame: "Shop\\Cart::Shop\\{closure}"}
    # through two builtins
    edges2 = [("Shop\\Cart::total", "call_user_func_array"), ("call_user_func_array", "array_map"),
              ("array_map", "Shop\\Cart::Shop\\{closure}")]
    assert closure_names(stacks, edges2) == {frame: "Shop\\Cart::Shop\\{closure}"}
    # the caller also runs another closure of the namespace itself: which one is it? not joined
    assert closure_names(stacks, edges + [("Shop\\Cart::total", "Shop\\Log::Shop\\{closure}")]) == {}


def test_the_names_namespace_must_be_the_closures_directory():
    """A generic caller's one closure in the profiled requests is not every closure it runs."""
    routes = "Illuminate\\Routing\\AbstractRouteCollection::Illuminate\\Routing\\{closure}"
    edges = [("Illuminate\\Support\\Arr::first", routes)]
    elsewhere = "{closure:/usr/share/php/Illuminate/Foo/Bar.php(9)}"
    assert closure_names([f"/i.php;Illuminate\\Support\\Arr::first;{elsewhere}"], edges) == {}
    there = "{closure:/usr/share/php/Illuminate/Routing/AbstractRouteCollection.php(81)}"
    assert closure_names([f"/i.php;Illuminate\\Support\\Arr::first;{there}"], edges) == {there: edges[0][1]}
    # PSR-4 directories need not match the namespace's case (App\ in app/); a global closure has none
    app = "{closure:/srv/site/app/Providers/RouteServiceProvider.php(14)}"
    provider = "App\\Providers\\RouteServiceProvider::App\\Providers\\{closure}"
    assert closure_names([f"/i.php;boot;{app}"], [("boot", provider)]) == {app: provider}
    assert closure_names(["/i.php;add_filter_run;{closure:/srv/wp/wp-includes/x.php(3)}"],
                         [("add_filter_run", "{closure}")])


def test_nested_closures_join_through_the_outer_ones_name():
    outer, inner = "{closure:/app/Pipeline.php(126)}", "{closure:/app/Pipeline.php(143)}"
    edges = [("Pipeline::then", "Pipeline::{closure}"), ("Pipeline::{closure}", "Pipeline::{closure}"),
             ("Pipeline::{closure}", "Kernel::handle")]
    joined = closure_names([f"index.php;Pipeline::then;{outer};{inner};Kernel::handle"], edges)
    assert joined == {outer: "Pipeline::{closure}", inner: "Pipeline::{closure}"}


def test_unknown_callers_and_disagreeing_stacks_stay_unjoined():
    f = "{closure:/app/a.php(1)}"
    assert closure_names([f"index.php;nobody_known;{f}"], [("other", "{closure}")]) == {}
    # the caller calls no closure in xhprof (the frame was sampled in a request not profiled)
    assert closure_names([f"index.php;run;{f}"], [("run", "strlen")]) == {}
    # a closure run by a file's top-level code: xhprof has no name for that caller
    assert closure_names([f"/app/index.php;{f}"], [("main()", "{closure}")]) == {}
    # two stacks, two answers: neither is trusted
    edges = [("a", "A::{closure}"), ("b", "B::{closure}")]
    assert closure_names([f"index.php;a;{f}", f"index.php;b;{f}"], edges) == {}
    # one stack cannot tell (two candidates), another can: still not trusted
    edges = [("a", "A::{closure}"), ("a", "B::{closure}"), ("b", "B::{closure}")]
    assert closure_names([f"index.php;a;{f}", f"index.php;b;{f}"], edges) == {}


def test_which_joins_speak_for_the_frame():
    edges = [(CALLBACK, LARAVEL), (LARAVEL, "PDOStatement::execute")]
    one = join([f"i.php;{CALLBACK};{RUN}"], edges)
    assert one.sole == one.same_callers == {RUN}
    # the select and the write closures, both run by runQueryCallback: one name, the same caller
    both = join([f"i.php;{CALLBACK};{RUN}", f"i.php;{CALLBACK};{WRITE}"], edges)
    assert both.names == {RUN: LARAVEL, WRITE: LARAVEL} and both.sole == set() and both.same_callers == {RUN, WRITE}
    assert frames_named({LARAVEL}, both) == {LARAVEL, RUN, WRITE}
    # one name, two callers: a CPU-bound callback beside the closure that runs the queries
    cpu = "{closure:/app/Repo.php(20)}"
    mixed = join(["i.php;Repo::run;{closure:/app/Repo.php(10)}", f"i.php;Repo::map;{cpu}"],
                 [("Repo::run", "Repo::{closure}"), ("Repo::map", "Repo::{closure}"),
                  ("Repo::{closure}", "PDOStatement::execute")])
    assert len(mixed.names) == 2 and mixed.sole == mixed.same_callers == set()
    assert frames_named({"Repo::{closure}"}, mixed) == {"Repo::{closure}"}
    # a name xhprof also shows under a caller the frame never had: its calls are not all the frame's
    other = join([f"i.php;{CALLBACK};{RUN}"], edges + [("Illuminate\\Support\\Collection::map", LARAVEL)])
    assert other.names == {RUN: LARAVEL} and other.sole == set() and other.same_callers == {RUN}
