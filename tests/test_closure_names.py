"""Excimer's closure frames joined to xhprof's closure names (lockdown/analyzers/closure_names.py),
on small call graphs written by hand: by the caller, by the class's file when the caller calls
closures of several classes, nested closures, recursion markers, and every case left unjoined."""
from __future__ import annotations

from lockdown.analyzers.closure_names import closure_names, frames_named

RUN = "{closure:/usr/share/php/Illuminate/Database/Connection.php(359)}"
LARAVEL = "Illuminate\\Database\\Connection::Illuminate\\Database\\{closure}"


def test_a_closure_takes_the_one_closure_name_its_caller_calls():
    stacks = [f"public/index.php;Illuminate\\Database\\Connection::runQueryCallback;{RUN}"]
    edges = [("Illuminate\\Database\\Connection::runQueryCallback", LARAVEL),
             (LARAVEL, "PDOStatement::execute"), ("Illuminate\\Database\\Connection::runQueryCallback", "is_null")]
    assert closure_names(stacks, edges) == {RUN: LARAVEL}
    # a recursion marker on either side is not part of the name
    assert closure_names(stacks, [("Illuminate\\Database\\Connection::runQueryCallback@1", LARAVEL + "@2")]) == {
        RUN: LARAVEL}


def test_the_class_file_tells_apart_the_closures_of_several_classes():
    mapper = "{closure:/srv/app/src/Shop/Price.php(40)}"
    edges = [("array_map", "Shop\\Price::Shop\\{closure}"), ("array_map", "Shop\\Tax::Shop\\{closure}")]
    assert closure_names([f"index.php;Shop\\Price::all;array_map;{mapper}"], edges) == {
        mapper: "Shop\\Price::Shop\\{closure}"}
    # a file no candidate's class lives in (no PSR-4 layout): not joined
    assert closure_names(["index.php;Shop\\Price::all;array_map;{closure:/srv/app/lib/misc.php(3)}"], edges) == {}


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
    # two stacks, two answers: neither is trusted
    edges = [("a", "A::{closure}"), ("b", "B::{closure}")]
    assert closure_names([f"index.php;a;{f}", f"index.php;b;{f}"], edges) == {}
    # one stack cannot tell (two candidates), another can: still not trusted
    edges = [("a", "A::{closure}"), ("a", "B::{closure}"), ("b", "B::{closure}")]
    assert closure_names([f"index.php;a;{f}", f"index.php;b;{f}"], edges) == {}


def test_frames_named_adds_the_joined_frames_of_the_named_functions():
    joined = {RUN: LARAVEL, "{closure:/app/x.php(2)}": "X::{closure}"}
    assert frames_named({LARAVEL, "Db::query"}, joined) == {LARAVEL, "Db::query", RUN}
