"""Flame graph SVGs (lockdown/reports/flamegraph.py): layout, pruning, reverse/icicle, escaping,
the PHP palette, differential graphs, several graphs on one page, and (when node is on PATH)
the inline script's zoom, search and URL state run against a small DOM stand-in."""
from __future__ import annotations

import gzip
import json
import re
import shutil
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from lockdown.analyzers.folded import read_folded
from lockdown.reports import palette as pal
from lockdown.reports.flamegraph import (FlameOptions, diff_frames, inline_svg,
                                         render_diff_flamegraph, render_flamegraph)

REPO = Path(__file__).resolve().parent.parent
EXPECTED = REPO / "fixtures" / "perf" / "expected"     # stackcollapse-perf.pl's real output
NS = "{http://www.w3.org/2000/svg}"
PLOT = 1180          # default width 1200 minus 10 px either side
EXCIMER = "main;{closure};WP::main;WP_Query->get_posts;mysqli_query"


# --- reading the SVG back ----------------------------------------------------------------------

def parse(svg: str) -> ET.Element:
    return ET.fromstring(svg.encode("utf-8"))


def frames(svg: str) -> list[dict]:
    """Every frame: name (from the tooltip), tooltip, x, y, width, fill, label, class, o, s."""
    out = []
    for g in parse(svg).iter(NS + "g"):
        if "fg-f" not in g.get("class", "").split():
            continue
        title = g.find(NS + "title").text
        rect = g.find(NS + "rect")
        text = g.find(NS + "text")
        out.append({"name": title[:title.rindex(" (")], "title": title,
                    "x": float(rect.get("x")), "y": float(rect.get("y")),
                    "w": float(rect.get("width")), "fill": rect.get("fill"),
                    "label": text.text or "", "cls": g.get("class").split()[1:],
                    "o": float(g.get("data-o")), "s": float(g.get("data-s"))})
    return out


def by_name(svg: str) -> dict[str, dict]:
    fs = frames(svg)
    out = {f["name"]: f for f in fs}
    assert len(out) == len(fs), "test inputs use each name once"
    return out


def rgb(fill: str) -> tuple[int, int, int]:
    m = re.fullmatch(r"rgb\((\d+),(\d+),(\d+)\)", fill)
    assert m, fill
    return tuple(int(v) for v in m.groups())


# --- layout ------------------------------------------------------------------------------------

def test_widths_are_proportional_to_counts_and_the_root_spans_everything():
    f = by_name(render_flamegraph({"a;b": 3, "a;c": 1}))
    assert set(f) == {"all", "a", "b", "c"}
    assert f["all"]["w"] == f["a"]["w"] == PLOT
    assert f["all"]["x"] == f["a"]["x"] == f["b"]["x"] == 10
    assert f["b"]["w"] == pytest.approx(3 * f["c"]["w"], abs=0.02)
    assert f["c"]["x"] == pytest.approx(10 + f["b"]["w"], abs=0.02)
    assert f["b"]["title"] == "b (3 samples, 75.00%)"
    assert f["all"]["title"] == "all (4 samples, 100.00%)"
    # one frame row each: b and c share a row above a, a above all
    assert f["b"]["y"] == f["c"]["y"] < f["a"]["y"] < f["all"]["y"]


def test_siblings_are_in_name_order_and_own_samples_come_first():
    f = by_name(render_flamegraph({"r;zeta": 1, "r;alpha": 1, "r;Mid": 1, "r;beta": 1, "r": 2}))
    order = sorted(["zeta", "alpha", "Mid", "beta"], key=lambda n: f[n]["x"])
    assert order == ["Mid", "alpha", "beta", "zeta"]             # code point order, like sort
    # r's own 2 samples sit at its left, where flamegraph.pl's merge of sorted lines puts them
    assert f["Mid"]["x"] == pytest.approx(10 + PLOT * 2 / 6, abs=0.02)


def test_same_input_in_another_order_gives_the_same_svg():
    a = {"x;y": 1, "x;z": 2, "w": 3}
    assert render_flamegraph(a) == render_flamegraph(dict(reversed(list(a.items()))))


def test_float_counts_and_count_name():
    f = by_name(render_flamegraph({"a;b": 1.5, "a;c": 0.5}, FlameOptions(count_name="ms")))
    assert f["b"]["title"] == "b (1.5 ms, 75.00%)"
    assert f["b"]["w"] == pytest.approx(3 * f["c"]["w"], abs=0.02)


def test_counts_in_data_attributes_are_exact():
    """What the script zooms and searches with: whole floats as integers, others as Python
    writes them, floats beyond 2**53 exactly (no integer they could be rounded to)."""
    def attrs(folded):
        svg = render_flamegraph(folded)
        total = re.search(r'data-total="([^"]*)"', svg).group(1)
        return total, dict((n, (o, w)) for o, w, n in
                           re.findall(r'data-o="([^"]*)" data-s="([^"]*)"><title>([^ <]*)', svg))
    total, f = attrs({"a;b": 1.5, "a;c": 2.0})
    assert total == "3.5" and f["b"] == ("0", "1.5") and f["c"] == ("1.5", "2")
    total, f = attrs({"a;b": 2.0 ** 53})
    assert total == "9007199254740992.0" and f["b"] == ("0", "9007199254740992.0")
    assert attrs({"a": 3})[0] == "3"


def test_rendering_leaves_the_garbage_collector_as_it_found_it():
    import gc
    try:
        for enabled in (True, False):
            (gc.enable if enabled else gc.disable)()
            render_flamegraph({"a;b": 1})
            assert gc.isenabled() is enabled
    finally:
        gc.enable()


def test_a_count_of_one_names_its_unit_in_the_singular_unless_a_symbol():
    for unit, one in (("samples", "sample"), ("calls", "call"), ("ms", "ms"), ("us", "us"), ("s", "s"),
                      ("class", "class")):
        f = by_name(render_flamegraph({"a;b": 1, "a;c": 3}, FlameOptions(count_name=unit)))
        assert f["b"]["title"] == f"b (1 {one}, 25.00%)" and f["c"]["title"] == f"c (3 {unit}, 75.00%)", unit


def test_minwidth_prunes_narrow_frames_and_their_children():
    folded = {"a;big": 100_000, "a;tiny": 1, "a;tiny;child": 1}   # tiny: 0.024 px wide
    assert set(by_name(render_flamegraph(folded))) == {"all", "a", "big"}
    assert set(by_name(render_flamegraph(folded, FlameOptions(minwidth=0)))) == \
        {"all", "a", "big", "tiny", "child"}
    # a wide minwidth removes big too; the root always stays
    assert set(by_name(render_flamegraph(folded, FlameOptions(minwidth=PLOT + 1)))) == {"all"}


def test_pruned_frames_do_not_make_the_graph_taller():
    folded = {"a": 100_000, "a;t1;t2;t3;t4": 1}
    assert parse(render_flamegraph(folded)).get("height") == \
        parse(render_flamegraph({"a": 100_000})).get("height")


def test_labels_are_cut_to_fit_with_two_dots():
    name = "AVeryLongClassName::aVeryLongMethodName"
    f = by_name(render_flamegraph({"r;" + name: 1, "r;other": 79}))   # 14.75 px: too narrow
    assert f[name]["label"] == ""
    f = by_name(render_flamegraph({"r;" + name: 1, "r;other": 5}))    # 196.7 px: 27 characters
    label = f[name]["label"]
    assert label.endswith("..") and name.startswith(label[:-2]) and len(label) == 27
    assert f["r"]["label"] == "r"


def test_reverse_puts_the_leaves_at_the_base():
    svg = render_flamegraph({"main;foo;leaf1": 2, "main;bar;leaf1": 1, "main;leaf2": 1},
                            FlameOptions(reverse=True))
    fs = frames(svg)
    rows: dict[float, list[str]] = {}
    for f in fs:
        rows.setdefault(f["y"], []).append(f["name"])
    bottom_up = [sorted(rows[y]) for y in sorted(rows, reverse=True)]
    assert bottom_up[0] == ["all"]
    assert bottom_up[1] == ["leaf1", "leaf2"]
    assert bottom_up[2] == ["bar", "foo", "main"]
    assert bottom_up[3] == ["main", "main"]
    leaf1 = next(f for f in fs if f["name"] == "leaf1")
    assert leaf1["w"] == pytest.approx(PLOT * 3 / 4, abs=0.02)


def test_inverted_is_an_icicle_with_the_root_on_top():
    folded = {"a;b;c": 1}
    flame = by_name(render_flamegraph(folded))
    icicle = by_name(render_flamegraph(folded, FlameOptions(inverted=True)))
    assert flame["all"]["y"] > flame["a"]["y"] > flame["b"]["y"] > flame["c"]["y"]
    assert icicle["all"]["y"] < icicle["a"]["y"] < icicle["b"]["y"] < icicle["c"]["y"]
    assert icicle["all"]["y"] == min(f["y"] for f in icicle.values())
    root = parse(render_flamegraph(folded, FlameOptions(inverted=True)))
    assert "Icicle Graph" in [t.text for t in root.iter(NS + "text")]
    # both at once: leaf-first, root on top
    both = by_name(render_flamegraph(folded, FlameOptions(inverted=True, reverse=True)))
    assert both["all"]["y"] < both["c"]["y"] < both["b"]["y"] < both["a"]["y"]


def test_geometry_options():
    svg = render_flamegraph({"a;b": 1}, FlameOptions(width=600, frame_height=20, title="T",
                                                     subtitle="sub"))
    root = parse(svg)
    assert root.get("width") == "600"
    f = by_name(svg)
    assert f["all"]["w"] == 580
    assert f["all"]["y"] - f["a"]["y"] == 20
    assert [t.text for t in root.iter(NS + "text")][:2] == ["T", "sub"]


def test_bad_input_and_options_are_refused():
    with pytest.raises(ValueError):
        render_flamegraph({"a": -1})
    with pytest.raises(ValueError):
        render_flamegraph({"a": float("nan")})
    for count in (True, "3", None):
        with pytest.raises(ValueError, match="is not a number"):
            render_flamegraph({"a": count})
    for bad, message in ((dict(width=29), "width must be at least 30"), (dict(frame_height=1), "frame_height"),
                         (dict(font_size=0), "font_size"), (dict(minwidth=-0.5), "minwidth")):
        with pytest.raises(ValueError, match=message):
            render_flamegraph({"a": 1}, FlameOptions(**bad))
    render_flamegraph({"a": 1}, FlameOptions(width=30, frame_height=2, font_size=0.5, minwidth=0))   # the least


def test_counts_for_people():
    from lockdown.reports.flamegraph import count_text
    assert [count_text(v) for v in (1234, 2.0, 1234.5, 12.3456, 0.256789, -0.5, 1.004)] == \
        ["1,234", "2", "1,234.5", "12.35", "0.257", "-0.5", "1"]
    with pytest.raises(ValueError):
        render_flamegraph({"a": 1}, FlameOptions(palette="rainbow"))
    with pytest.raises(ValueError):
        render_flamegraph({"a": 1}, FlameOptions(id_prefix="1 bad"))
    with pytest.raises(ValueError):
        render_flamegraph({"a": 1}, FlameOptions(count_name="samples (ns)"))


# --- empty input -------------------------------------------------------------------------------

@pytest.mark.parametrize("folded", [{}, {"a": 0}])
def test_empty_input_is_a_valid_svg_saying_no_samples(folded):
    svg = render_flamegraph(folded)
    root = parse(svg)
    assert root.tag == NS + "svg"
    assert "No samples" in [t.text for t in root.iter(NS + "text")]
    assert frames(svg) == []
    diff = render_diff_flamegraph({}, {})
    assert "No samples" in [t.text for t in parse(diff).iter(NS + "text")]
    assert frames(render_diff_flamegraph({"a": 3}, {})) == []


# --- escaping ----------------------------------------------------------------------------------

EVIL = "<script>alert('x')</script>&amp &#60 \"quoted\" ]]> <img src=x onerror=alert(1)>\x01"
assert ";" not in EVIL          # a ";" would split it into two frames


def test_evil_frame_names_come_out_as_text():
    svg = render_flamegraph({f"main;{EVIL};leaf": 2, "main;ok": 1},
                            FlameOptions(title=EVIL, subtitle=EVIL, count_name="s<b>"))
    root = parse(svg)                                   # well-formed XML despite the \x01
    tags = [el.tag for el in root.iter()]
    assert tags.count(NS + "script") == 1               # ours, no injected one
    assert not any(t.endswith("img") or t.endswith("b") for t in tags)
    assert svg.count("]]>") == 1                        # only the end of our script's CDATA
    shown = EVIL.replace("\x01", "\ufffd")
    f = by_name(svg)
    assert shown in f
    assert f[shown]["title"] == f"{shown} (2 s<b>, 66.67%)"
    texts = [t.text for t in root.iter(NS + "text")]
    assert texts[0] == shown and texts[1] == shown      # title and subtitle
    assert "<script>alert" not in svg and "&lt;script&gt;alert" in svg


def test_evil_names_in_a_differential_graph():
    svg = render_diff_flamegraph({f"a;{EVIL}": 1}, {f"a;{EVIL}": 2})
    root = parse(svg)
    assert [el.tag for el in root.iter()].count(NS + "script") == 1
    assert EVIL.replace("\x01", "\ufffd") in by_name(svg)


# --- palette -----------------------------------------------------------------------------------

@pytest.mark.parametrize("name,php,leaf_only,expected", [
    ("main", True, False, "php"),
    ("{closure}", True, False, "php"),
    ("{closure:/srv/www/wp-includes/plugin.php(12)}", True, False, "php"),
    ("WP::main", True, False, "php"),
    ("WP_Query->get_posts", True, True, "php"),
    ("/srv/www/index.php", True, False, "php"),
    ("Composer\\Autoload\\includeFile", True, True, "php"),
    ("mysqli_query", True, True, "builtin"),
    ("preg_match", True, True, "builtin"),
    ("str_replace", True, True, "builtin"),
    ("wp_parse_args", True, False, "php"),          # calls something: user code
    ("[unknown]", True, True, "unknown"),
    ("php-fpm8.2", False, False, "engine"),
    ("main", False, False, "other"),                # C's main in a perf stack
    ("execute_ex", False, False, "engine"),
    ("zend_hash_find_bucket", False, False, "engine"),
    ("ZEND_DO_FCALL_SPEC_RETVAL_USED_HANDLER", False, False, "engine"),
    ("_emalloc_56", False, False, "engine"),
    ("zif_preg_match", False, False, "engine"),
    ("php_pcre_match_impl", False, False, "engine"),
    ("__memset_evex", False, False, "lib"),
    ("__libc_start_main", False, False, "lib"),
    ("pthread_mutex_lock", False, False, "lib"),
    ("clock_gettime@@GLIBC_2.17", False, False, "lib"),
    ("pcre2_match_8", False, False, "lib"),
    ("clear_page_erms_[k]", False, False, "kernel"),
    ("[[kernel.kallsyms]]", False, False, "kernel"),
    ("entry_SYSCALL_64_after_hwframe", False, False, "kernel"),
    ("swapper", False, False, "kernel"),
    ("JIT$WP_Hook::apply_filters", False, False, "jit"),
    ("foo_[j]", False, False, "jit"),
    ("[perf-4243.map]", False, False, "jit"),
    ("[unknown]", False, False, "unknown"),
    ("[php-fpm8.2]", False, False, "unknown"),
    ("php-fpm8.2+0x110816", False, False, "unknown"),
    ("zend_hash_find_[i]", False, False, "engine"),
    ("tcp_sendmsg", False, False, "other"),
])
def test_php_palette_categories(name, php, leaf_only, expected):
    assert pal.classify(name, php=php, leaf_only=leaf_only) == expected


def test_exact_builtins_list():
    builtins = {"preg_match", "pdo"}
    assert pal.classify("preg_match", php=True, builtins=builtins) == "builtin"
    assert pal.classify("PDO->query", php=True, builtins=builtins) == "builtin"
    assert pal.classify("PDO::__construct", php=True, builtins=builtins) == "builtin"
    assert pal.classify("my_leaf_function", php=True, leaf_only=True, builtins=builtins) == "php"
    svg = render_flamegraph({"main;my_leaf;PDO->query": 1, "main;my_leaf2": 1},
                            FlameOptions(builtins={"PDO"}))
    f = by_name(svg)
    assert f["PDO->query"]["cls"] == ["fg-builtin"]
    assert f["my_leaf2"]["cls"] == ["fg-php"]


def test_categories_in_the_svg_follow_the_stack_kind():
    svg = render_flamegraph({
        EXCIMER: 3,
        "main;wp_parse_args;array_key_exists": 1,
        "php-fpm8.2;main;execute_ex;zend_hash_find;_emalloc;__memset_evex;page_fault_[k]": 2,
        "php-fpm8.2;[unknown];php-fpm8.2+0x110816": 1,
        "php-fpm8.2;execute_ex;JIT$foo_[j]": 1,
    })
    fs = frames(svg)
    cls = {(f["name"], f["y"]): f["cls"][0] for f in fs}
    excimer_main = [c for (n, _), c in cls.items() if n == "main"]
    assert sorted(excimer_main) == ["fg-other", "fg-php"]      # PHP's main vs C's main()
    named = {f["name"]: f["cls"][0] for f in fs if f["name"] != "main"}
    assert named["{closure}"] == named["WP::main"] == named["WP_Query->get_posts"] == "fg-php"
    assert named["mysqli_query"] == named["array_key_exists"] == "fg-builtin"
    assert named["wp_parse_args"] == "fg-php"
    assert named["php-fpm8.2"] == named["zend_hash_find"] == named["_emalloc"] == "fg-engine"
    assert named["__memset_evex"] == "fg-lib"
    assert named["page_fault_[k]"] == "fg-kernel"
    assert named["[unknown]"] == named["php-fpm8.2+0x110816"] == "fg-unknown"
    assert named["JIT$foo_[j]"] == "fg-jit"
    assert named["all"] == "fg-root"
    # each fill lies in its category's range
    for f in fs:
        cat = f["cls"][0][3:]
        if cat in pal.CATEGORIES:
            c = pal.CATEGORIES[cat]
            for v, lo, hi in zip(rgb(f["fill"]), c.lo, c.hi):
                assert lo <= v <= hi, (f["name"], f["fill"], cat)
    # the legend names the categories present, in a fixed order
    legend = [t.text for g in parse(svg).iter(NS + "g") if g.get("id", "").endswith("-legend")
              for t in g.iter(NS + "text")]
    assert legend == ["PHP code", "PHP builtin", "PHP engine", "libraries", "kernel", "JIT",
                      "unknown", "other native"]


def test_frames_above_a_kernel_frame_are_kernel():
    f = by_name(render_flamegraph({"php-fpm8.2;[[kernel.kallsyms]];get_page_from_freelist": 1}))
    assert f["get_page_from_freelist"]["cls"] == ["fg-kernel"]


def test_colours_are_stable_across_graphs():
    one = by_name(render_flamegraph({EXCIMER: 5, "main;Foo::bar": 2}))
    two = by_name(render_flamegraph({"/srv/a.php;WP_Query->get_posts;Other::thing": 1,
                                     "/srv/index.php;main;{closure}": 9}, FlameOptions(width=800)))
    assert one["WP_Query->get_posts"]["fill"] == two["WP_Query->get_posts"]["fill"]
    assert one["{closure}"]["fill"] == two["{closure}"]["fill"]
    assert one["Foo::bar"]["fill"] != one["WP::main"]["fill"]          # shades differ by name
    hot1 = by_name(render_flamegraph({"a;b": 1}, FlameOptions(palette="hot")))
    hot2 = by_name(render_flamegraph({"x;b": 7, "q": 1}, FlameOptions(palette="hot")))
    assert hot1["b"]["fill"] == hot2["b"]["fill"]


def test_hot_palette_is_flamegraph_pl_red_to_yellow():
    hot = FlameOptions(palette="hot")
    fs = frames(render_flamegraph({f"f{i};g{i}": 1 for i in range(50)}, hot))
    for f in fs:
        r, g, b = rgb(f["fill"])
        assert 205 <= r <= 255 and 0 <= g <= 230 and 0 <= b <= 55
    assert len({f["fill"] for f in fs}) > 40
    assert not any(g.get("id", "").endswith("-legend")
                   for g in parse(render_flamegraph({"a": 1}, FlameOptions(palette="hot"))).iter())


def test_native_palette_ignores_php_heuristics():
    native = FlameOptions(palette="native")
    f = by_name(render_flamegraph({"main;WP::main;mysqli_query": 1}, native))
    assert f["mysqli_query"]["cls"] == ["fg-other"]
    assert f["main"]["cls"] == ["fg-other"]


# --- differential ------------------------------------------------------------------------------

def test_diff_colours_grew_red_and_shrank_blue_with_normalisation():
    before = {"a;b": 10, "a;c": 10}
    after = {"a;b": 30, "a;c": 10}
    d = diff_frames(before, after)                  # before scaled by 40/20 = 2
    assert d[()] == (40, 40)
    assert d[("a",)] == (40, 40)
    assert d[("a", "b")] == (20, 30)
    assert d[("a", "c")] == (20, 10)
    f = by_name(render_diff_flamegraph(before, after))
    r, g, b = rgb(f["b"]["fill"])
    assert r == 255 and g == b < 200                # red: grew
    r, g, b = rgb(f["c"]["fill"])
    assert b == 255 and r == g < 200                # blue: shrank
    assert f["a"]["fill"] == f["all"]["fill"] == "rgb(255,255,255)"     # unchanged
    # intensity follows the relative change: halved is as strong as doubled, tripled stronger
    assert rgb(f["c"]["fill"])[0] == rgb(pal.diff_color(1, 2))[1]
    assert rgb(f["b"]["fill"])[1] > rgb(pal.diff_color(1, 3))[1]
    # widths from AFTER
    assert f["b"]["w"] == pytest.approx(3 * f["c"]["w"], abs=0.02)
    assert f["b"]["title"] == "b (30 samples, 75.00%; before 20, change +50.00%)"
    assert f["c"]["title"] == "c (10 samples, 25.00%; before 20, change -50.00%)"


def test_diff_classes_and_tooltips_both_ways():
    before = {"a;b": 10, "a;c": 10, "a;gone": 5, "a;d": 5}
    after = {"a;b": 30, "a;c": 5, "a;new": 5, "a;d": 5}
    f = by_name(render_diff_flamegraph(before, after, normalize=False))
    assert {n: (v["cls"], v["title"]) for n, v in f.items() if n != "all"} == {
        "a": (["fg-grew"], "a (45 samples, 100.00%; before 30, change +50.00%)"),
        "b": (["fg-grew"], "b (30 samples, 66.67%; before 10, change +200.00%)"),
        "c": (["fg-shrank"], "c (5 samples, 11.11%; before 10, change -50.00%)"),
        "d": (["fg-same"], "d (5 samples, 11.11%; before 5, change +0.00%)"),
        "new": (["fg-grew"], "new (5 samples, 11.11%; before 0, change new)")}
    assert f["all"]["cls"] == ["fg-root"]
    # BEFORE's picture: what vanished is drawn, with what AFTER made of each frame
    g = by_name(render_diff_flamegraph(before, after, normalize=False, widths="before"))
    assert {n: (v["cls"], v["title"]) for n, v in g.items() if n != "all"} == {
        "a": (["fg-grew"], "a (30 samples, 100.00%; after 45, change +50.00%)"),
        "b": (["fg-grew"], "b (10 samples, 33.33%; after 30, change +200.00%)"),
        "c": (["fg-shrank"], "c (10 samples, 33.33%; after 5, change -50.00%)"),
        "d": (["fg-same"], "d (5 samples, 16.67%; after 5, change +0.00%)"),
        "gone": (["fg-shrank"], "gone (5 samples, 16.67%; after 0, change gone)")}
    assert g["b"]["w"] == pytest.approx(2 * g["d"]["w"], abs=0.02)          # widths from BEFORE
    # normalised, AFTER is scaled down to BEFORE's total: b doubled, not tripled
    n = by_name(render_diff_flamegraph(before, after, widths="before"))
    assert n["b"]["title"] == "b (10 samples, 33.33%; after 20, change +100.00%)"
    with pytest.raises(ValueError, match="widths must be 'after' or 'before'"):
        render_diff_flamegraph(before, after, widths="both")


def test_a_frame_unchanged_but_for_float_rounding_is_unchanged():
    """AFTER is BEFORE x 1.7 (time per request scaled): normalised, every frame is the same,
    although the scaled counts differ in their last bits (they read 'shrank, -0.00%')."""
    before = {"r;f0": 43, "r;f1": 41, "r;f2": 28, "r;f3": 4}
    after = {k: v * 1.7 for k, v in before.items()}
    for widths in ("after", "before"):
        f = by_name(render_diff_flamegraph(before, after, widths=widths))
        classes = {n: v["cls"] for n, v in f.items() if n != "all"}
        assert classes == {n: ["fg-same"] for n in ("r", "f0", "f1", "f2", "f3")}
        assert all(v["title"].endswith("change +0.00%)") for n, v in f.items() if n != "all")


def test_diff_without_normalisation():
    before = {"a;b": 10, "a;c": 10}
    after = {"a;b": 30, "a;c": 10}
    assert diff_frames(before, after, normalize=False)[("a", "c")] == (10, 10)
    f = by_name(render_diff_flamegraph(before, after, normalize=False))
    assert f["c"]["fill"] == "rgb(255,255,255)"
    assert rgb(f["a"]["fill"])[2] < 255 and rgb(f["a"]["fill"])[0] == 255     # a grew 20 -> 40
    # the same totals: normalising changes nothing
    same = {"a;b": 5, "a;c": 15}
    assert diff_frames(before, same) == diff_frames(before, same, normalize=False)


def test_frames_only_in_before_vanish_but_diff_frames_has_them():
    before = {"a;gone": 5, "a;b": 5}
    after = {"a;b": 10, "a;new": 2}
    d = diff_frames(before, after)
    assert d[("a", "gone")] == (pytest.approx(6.0), 0)
    assert d[("a", "new")] == (0, 2)
    f = by_name(render_diff_flamegraph(before, after))
    assert "gone" not in f
    assert f["new"]["title"].endswith("; before 0, change new)")
    assert rgb(f["new"]["fill"]) == (255, 50, 50)                        # as red as it gets
    assert f["b"]["w"] == pytest.approx(5 * f["new"]["w"], abs=0.02)


def test_diff_reverse_and_legend():
    before = {"a;x": 1, "b;x": 1}
    after = {"a;x": 4}
    d = diff_frames(before, after, reverse=True, normalize=False)
    assert d[("x",)] == (2, 4) and d[("x", "b")] == (1, 0)
    svg = render_diff_flamegraph(before, after, FlameOptions(reverse=True))
    assert set(by_name(svg)) == {"all", "x", "a"}
    texts = [t.text for t in parse(svg).iter(NS + "text")]
    assert "Differential Flame Graph" in texts
    assert {"grew", "shrank", "unchanged"} <= set(texts)
    assert any(t and t.startswith("widths: after; before scaled x2") for t in texts)


# --- several graphs on one page ----------------------------------------------------------------

def all_ids(root: ET.Element) -> list[str]:
    return [el.get("id") for el in root.iter() if el.get("id") is not None]


def test_ids_are_unique_when_two_graphs_share_an_html_page():
    one = render_flamegraph({"a;b": 1})
    two = render_flamegraph({"a;c": 1})
    three = render_diff_flamegraph({"a;b": 1}, {"a;b": 2})
    page = ('<html xmlns="http://www.w3.org/1999/xhtml"><body>'
            + "".join(inline_svg(s) for s in (one, two, three)) + "</body></html>")
    root = ET.fromstring(page)
    ids = all_ids(root)
    assert len(ids) == len(set(ids)) and len(ids) >= 3 * 9
    for svg in root.iter(NS + "svg"):
        p = svg.get("id")
        inner = all_ids(svg)
        assert all(i == p or i.startswith(p + "-") for i in inner)
        for el in svg.iter():
            for v in el.attrib.values():
                for ref in re.findall(r"url\(#([^)]+)\)", v):
                    assert ref in inner            # references stay inside the graph
        script = svg.find(NS + "script").text
        assert f"var ID = {json.dumps(p)};" in script
        standalone_check = "svg === document.documentElement"
        assert "document.documentElement" not in script.replace(standalone_check, "")
        style = svg.find(NS + "style").text
        for rule in filter(None, (line.strip() for line in style.splitlines())):
            assert rule.startswith("#" + p)         # CSS scoped to this graph
    # the same graph twice: pass a prefix
    a = render_flamegraph({"a;b": 1}, FlameOptions(id_prefix="left"))
    b = render_flamegraph({"a;b": 1}, FlameOptions(id_prefix="right"))
    assert parse(a).get("id") == "left" and parse(b).get("id") == "right"
    assert render_flamegraph({"a;b": 1}) == one                  # reproducible


def test_inline_svg_drops_only_the_xml_declaration():
    svg = render_flamegraph({"a": 1})
    assert svg.startswith("<?xml")
    assert inline_svg(svg).startswith("<svg ")
    assert inline_svg(inline_svg(svg)) == inline_svg(svg)


def fixture_folded(name: str, tmp_path: Path) -> dict:
    path = tmp_path / name
    path.write_bytes(gzip.decompress((EXPECTED / f"{name}.gz").read_bytes()))
    return read_folded(path)


def test_small_fixture_renders(tmp_path):
    svg = render_flamegraph(fixture_folded("small.default.folded", tmp_path))
    f = frames(svg)
    assert len(f) == 30
    names = {x["name"] for x in f}
    assert "RegExp:[&<>]" in names
    assert sum(x["s"] for x in f if x["y"] == max(y["y"] for y in f) - 16) == 70707070


def test_real_wordpress_profile(tmp_path):
    """stackcollapse-perf.pl --kernel --jit on a WordPress perf capture."""
    folded = fixture_folded("wordpress.kernel-jit.folded", tmp_path)
    svg = render_flamegraph(folded)
    fs = frames(svg)
    cats = {f["cls"][0] for f in fs}
    assert {"fg-engine", "fg-kernel", "fg-jit", "fg-unknown", "fg-lib"} <= cats
    assert sum(f["cls"][0] == "fg-other" for f in fs) <= 2
    total = sum(folded.values())
    assert fs[0]["name"] == "all" and fs[0]["s"] == total
    kept = [f for f in fs if f["w"] >= 0.1]
    assert len(kept) == len(fs)                                  # nothing under minwidth drawn
    # every frame's children lie within it: offsets and counts nest
    for f in fs:
        assert 0 <= f["o"] and f["o"] + f["s"] <= total


# --- the inline script, under node with a small DOM stand-in -----------------------------------

SHIM = r"""
const vm = require("vm");
const input = JSON.parse(require("fs").readFileSync(0, "utf8"));
class El {
  constructor(tag, attrs, text) {
    this.localName = tag; this.attrs = Object.assign({}, attrs); this.children = [];
    this.parentNode = null; this._text = text || ""; this.listeners = {};
    const el = this;
    this.classList = {
      list() { return (el.attrs["class"] || "").split(/\s+/).filter(Boolean); },
      add(c) { const l = this.list(); if (!l.includes(c)) l.push(c); el.attrs["class"] = l.join(" "); },
      remove(c) { el.attrs["class"] = this.list().filter(x => x !== c).join(" "); },
      contains(c) { return this.list().includes(c); },
    };
  }
  getAttribute(k) { return k in this.attrs ? this.attrs[k] : null; }
  setAttribute(k, v) { this.attrs[k] = String(v); }
  get textContent() { return this.children.length ? this.children.map(c => c.textContent).join("") : this._text; }
  set textContent(v) { this.children = []; this._text = String(v); }
  get ownerSVGElement() { let n = this.parentNode; while (n && n.localName !== "svg") n = n.parentNode; return n; }
  all() { let out = [this]; for (const c of this.children) out = out.concat(c.all()); return out; }
  querySelector(sel) {
    if (sel[0] !== "#") throw new Error("shim: only #id selectors: " + sel);
    return this.all().slice(1).find(e => e.attrs.id === sel.slice(1)) || null;
  }
  addEventListener(type, fn) { (this.listeners[type] = this.listeners[type] || []).push(fn); }
}
function build(node, parent) {
  const el = new El(node.tag, node.attrs, node.text);
  el.parentNode = parent;
  for (const c of node.children) el.children.push(build(c, el));
  return el;
}
function fire(target, type, extra) {
  const ev = Object.assign({type, target, defaultPrevented: false,
                            preventDefault() { this.defaultPrevented = true; }}, extra || {});
  for (let n = target; n; n = n.parentNode) for (const fn of (n.listeners[type] || [])) fn(ev);
  for (const fn of (win.listeners[type] || [])) fn(ev);
  return ev;
}
const docEl = build(input.tree, null);
const url = {search: input.search || "", pathname: "/graph.svg", hash: ""};
const answers = [];
const win = {
  listeners: {}, location: url,
  addEventListener(type, fn) { (this.listeners[type] = this.listeners[type] || []).push(fn); },
  prompt() { return answers.shift(); },
  history: { state: null, replaceState(state, title, u) {
    const q = u.indexOf("?"); url.search = q < 0 ? "" : u.slice(q).split("#")[0]; } },
};
const doc = {documentElement: docEl, currentScript: null,
             getElementById(id) { return docEl.all().find(e => e.attrs.id === id) || null; }};
const ctx = vm.createContext({window: win, document: doc, console});
for (const s of docEl.all().filter(e => e.localName === "script")) {
  doc.currentScript = input.currentScript === false ? null : s;
  vm.runInContext(s.textContent, ctx);
  doc.currentScript = null;
}
const svgs = docEl.all().filter(e => e.localName === "svg");
function frameEls(svg) {
  return svg.all().filter(e => e.localName === "g" && (e.attrs["class"] || "").split(" ").includes("fg-f"));
}
function named(svg, name) {
  const hits = frameEls(svg).filter(g => {
    const t = g.children.find(c => c.localName === "title").textContent;
    return t.slice(0, t.lastIndexOf(" (")) === name;
  });
  if (hits.length !== 1) throw new Error("shim: " + hits.length + " frames named " + name);
  return hits[0];
}
function snapshot() {
  return {search: url.search, graphs: svgs.map(svg => ({
    id: svg.attrs.id,
    details: svg.querySelector("#" + svg.attrs.id + "-details").textContent,
    matched: svg.querySelector("#" + svg.attrs.id + "-matched").textContent,
    unzoom: svg.querySelector("#" + svg.attrs.id + "-unzoom").attrs["class"],
    clear: svg.querySelector("#" + svg.attrs.id + "-clear").attrs["class"],
    frames: frameEls(svg).map(g => {
      const r = g.children.find(c => c.localName === "rect"), t = g.children.find(c => c.localName === "text");
      const title = g.children.find(c => c.localName === "title").textContent;
      return {name: title.slice(0, title.lastIndexOf(" (")), x: +r.attrs.x, w: +r.attrs.width,
              fill: r.attrs.fill, label: t.textContent, cls: g.attrs["class"]};
    })}))};
}
const out = [];
for (const [what, graph, arg] of input.actions) {
  const svg = svgs[graph];
  const ctl = name => svg.querySelector("#" + svg.attrs.id + "-" + name);
  if (what === "click") fire(named(svg, arg).children.find(c => c.localName === "rect"), "click");
  else if (what === "hover") fire(named(svg, arg).children.find(c => c.localName === "rect"), "mouseover");
  else if (what === "control") fire(ctl(arg), "click");
  else if (what === "answer") answers.push(arg);
  else if (what === "enter") fire(svg, "mouseenter");
  else if (what === "leave") fire(svg, "mouseleave");
  else if (what === "key") out.push({prevented: fire(docEl, "keydown", arg).defaultPrevented});
  else if (what === "snapshot") out.push(snapshot());
  else throw new Error("shim: " + what);
}
process.stdout.write(JSON.stringify(out));
"""

NODE = shutil.which("node")
needs_node = pytest.mark.skipif(NODE is None, reason="node is not on PATH")


def to_tree(el: ET.Element) -> dict:
    return {"tag": el.tag.rsplit("}", 1)[-1], "attrs": dict(el.attrib), "text": el.text or "",
            "children": [to_tree(c) for c in el]}


def run_script(doc: ET.Element, actions: list, *, tmp_path: Path, search: str = "",
               current_script: bool = True) -> list:
    shim = tmp_path / "fg_shim.js"
    shim.write_text(SHIM)
    payload = json.dumps({"tree": to_tree(doc), "actions": actions, "search": search,
                          "currentScript": current_script})
    r = subprocess.run([NODE, str(shim)], input=payload, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def frame_state(snap: dict, graph: int = 0) -> dict[str, dict]:
    return {f["name"]: f for f in snap["graphs"][graph]["frames"]}


ZOOM_INPUT = {"a;b;d": 2, "a;b;e": 2, "a;c": 4, "a;b;b2": 2}


@needs_node
@pytest.mark.parametrize("inverted", [False, True])
@pytest.mark.parametrize("current_script", [True, False])
def test_script_zoom_and_reset(tmp_path, inverted, current_script):
    svg = render_flamegraph(ZOOM_INPUT, FlameOptions(inverted=inverted))
    orig = by_name(svg)
    snaps = run_script(parse(svg), [["hover", 0, "c"], ["snapshot"], ["click", 0, "b"], ["snapshot"],
                                    ["control", 0, "unzoom"], ["snapshot"]],
                       tmp_path=tmp_path, current_script=current_script)
    assert snaps[0]["graphs"][0]["details"] == "Function: c (4 samples, 40.00%)"
    z = frame_state(snaps[1])
    assert z["b"]["x"] == 10 and z["b"]["w"] == PLOT and "fg-parent" not in z["b"]["cls"]
    for anc in ("all", "a"):                            # ancestors: greyed, full width
        assert z[anc]["w"] == PLOT and "fg-parent" in z[anc]["cls"]
    assert "fg-hide" in z["c"]["cls"]                   # the sibling is hidden
    assert z["b2"]["w"] == pytest.approx(PLOT / 3, abs=0.02) and z["b2"]["x"] == 10
    assert z["d"]["x"] == pytest.approx(10 + PLOT / 3, abs=0.02)
    assert z["b"]["label"] == "b" and len(z["b2"]["label"]) > 0
    assert "fg-hide" not in snaps[1]["graphs"][0]["unzoom"]
    assert snaps[1]["search"] == f"?x={orig['b']['x']:g}&y={orig['b']['y']:g}"
    back = frame_state(snaps[2])
    for name, f in orig.items():
        assert back[name]["x"] == f["x"] and back[name]["w"] == f["w"]
        assert back[name]["label"] == f["label"] and back[name]["cls"].split()[1:] == f["cls"]
    assert "fg-hide" in snaps[2]["graphs"][0]["unzoom"] and snaps[2]["search"] == ""


@needs_node
def test_script_search_matched_percent_without_double_counting(tmp_path):
    svg = render_flamegraph(ZOOM_INPUT)
    snaps = run_script(parse(svg), [
        ["answer", 0, "^b"], ["control", 0, "search"], ["snapshot"],     # b and b2 (inside b)
        ["answer", 0, "^(d|c)$"], ["key", 0, {"ctrlKey": True, "key": "f"}], ["snapshot"],
        ["click", 0, "b"], ["snapshot"],                                 # zoomed: share of b
        ["control", 0, "ignorecase"], ["answer", 0, "^D$"], ["control", 0, "search"], ["snapshot"],
        ["control", 0, "clear"], ["snapshot"],
    ], tmp_path=tmp_path)
    s = snaps[0]["graphs"][0]
    assert s["matched"] == "Matched: 60.0%"
    f = frame_state(snaps[0])
    assert f["b"]["fill"] == f["b2"]["fill"] == "rgb(230,0,230)" != f["d"]["fill"]
    assert "fg-hide" not in s["clear"]
    assert snaps[0]["search"] == "?s=%5Eb"
    assert snaps[1] == {"prevented": True}
    assert snaps[2]["graphs"][0]["matched"] == "Matched: 60.0%"           # c 40% + d 20%
    assert snaps[3]["graphs"][0]["matched"] == "Matched: 33.3%"           # d within b
    assert snaps[4]["graphs"][0]["matched"] == "Matched: 33.3%"           # case ignored
    cleared = snaps[5]["graphs"][0]
    assert cleared["matched"] == " " and "fg-hide" in cleared["clear"]
    orig = by_name(svg)
    assert all(f["fill"] == orig[n]["fill"] for n, f in frame_state(snaps[5]).items())
    assert snaps[5]["search"].startswith("?x=")                           # zoom kept, no s


@needs_node
def test_script_restores_zoom_and_search_from_the_url(tmp_path):
    svg = render_flamegraph(ZOOM_INPUT)
    b = by_name(svg)["b"]
    snaps = run_script(parse(svg), [["snapshot"]], tmp_path=tmp_path,
                       search=f"?x={b['x']:g}&y={b['y']:g}&s=%5Ed%24&other=1")
    g = snaps[0]["graphs"][0]
    z = frame_state(snaps[0])
    assert z["b"]["w"] == PLOT and "fg-hide" in z["c"]["cls"]
    assert z["d"]["fill"] == "rgb(230,0,230)" and g["matched"] == "Matched: 33.3%"
    assert "other=1" in snaps[0]["search"]                               # others' keys kept


@needs_node
def test_script_keeps_graphs_on_one_page_apart(tmp_path):
    one = render_flamegraph(ZOOM_INPUT)
    two = render_flamegraph({"x;y": 1, "x;z": 3})
    page = ET.fromstring('<html xmlns="http://www.w3.org/1999/xhtml"><body>'
                         + inline_svg(one) + inline_svg(two) + "</body></html>")
    p1, p2 = parse(one).get("id"), parse(two).get("id")
    snaps = run_script(page, [
        ["click", 1, "z"], ["snapshot"],
        ["answer", 0, "b"], ["key", 0, {"ctrlKey": True, "key": "f"}],   # pointer on no graph
        ["enter", 0], ["key", 0, {"ctrlKey": True, "key": "f"}], ["leave", 0], ["snapshot"],
    ], tmp_path=tmp_path)
    first = frame_state(snaps[0], 0)
    assert all("fg-hide" not in f["cls"] for f in first.values())        # graph 1 untouched
    second = frame_state(snaps[0], 1)
    assert second["z"]["w"] == PLOT and "fg-hide" in second["y"]["cls"]
    assert snaps[0]["search"].startswith(f"?{p2}.x=")
    assert snaps[1] == {"prevented": False} and snaps[2] == {"prevented": True}
    last = snaps[3]
    assert last["graphs"][0]["matched"] == "Matched: 60.0%"
    assert last["graphs"][1]["matched"] == " "
    assert f"{p1}.s=b" in last["search"] and f"{p2}.x=" in last["search"]


@needs_node
def test_script_on_an_empty_graph(tmp_path):
    snaps = run_script(parse(render_flamegraph({})), [["answer", 0, "x"], ["control", 0, "search"],
                                                      ["snapshot"]], tmp_path=tmp_path)
    assert snaps[0]["graphs"][0]["frames"] == []
    assert snaps[0]["graphs"][0]["matched"] == "Matched: 0.0%"
