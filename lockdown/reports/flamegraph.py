"""Flame graph SVGs from folded stacks, as a pure function (no files, no processes).

Why: flamegraph.pl is the picture people know, but it is a Perl script under the CDDL, its default
colours are random, and it has no idea of PHP. This renderer reproduces the behaviour users
expect from flamegraph.pl (docs/analysis.md, "Flame graphs") with our own code and template
(templates/flamegraph.svg.j2) and a PHP-aware palette (lockdown/reports/palette.py).

Layout (as flamegraph.pl)
- Stacks are merged into a tree under a root frame "all" (the total). Siblings are ordered by
  name (code point order), so the same input always gives the same picture. A frame's own
  samples (those where it is the leaf) sit at its left, before its children, where
  flamegraph.pl's merge of sorted lines puts them. (flamegraph.pl orders siblings by whole
  stack lines, which differs from name order only when one name is a prefix of another and the
  next character sorts before ";"; there it can even draw the frame twice. Here it is one frame.)
- Widths are proportional to counts over `width - 20` pixels (10 px margin either side). Frames
  narrower than `minwidth` pixels are left out with everything above them (--minwidth).
- `reverse`: every stack is merged leaf first, so the leaves form the base (--reverse).
  `inverted`: an icicle, root at the top (--inverted; the default title becomes "Icicle Graph").
- Each frame is `<g class="fg-f fg-KIND" data-o=OFFSET data-s=COUNT>` (KIND: the palette
  category, `hot`, or in a differential graph `grew`, `shrank`, `same`; `root` for "all") holding
  `<title>name (N samples, P%)</title>`, a `<rect>` in the SVG's own coordinates and a `<text>`
  label cut to fit with "..". The label rule: (width - 3) / (0.59 x font size) characters,
  nothing under 3 (flamegraph.pl's estimate of Verdana's average glyph width).
- Counts may be floats; a stack with count 0 is skipped; negative or non-finite counts raise
  ValueError. An empty input (or all counts 0) is a valid SVG that says "No samples".

The inline script (ES5 plus Array.from, no globals) supports: click a frame to zoom to it (its
ancestors stay, greyed and full width; everything beside it is hidden; clicking "all" or "Reset
Zoom" unzooms), "Search" (a prompt for a regular expression, also Ctrl-F / F3) highlighting
matches in `search_color` with "Matched: N%" (the share of the graph, or of the zoomed frame,
covered by matches; a match inside a match is not counted twice), "ic" to ignore case, "Clear",
the hovered frame's tooltip text on the details line, and zoom and search kept in the URL
(`?x=..&y=..` = the zoomed frame's rect, `?s=..` = the search) so a reload restores them.

Several graphs on one HTML page: the markup (optionally without the XML declaration, see
`inline_svg`) can be pasted into a page as it is. Every id carries a per-graph prefix (derived
from a hash of the input and options, so output is reproducible; set `id_prefix` to embed the
same graph twice), CSS rules are scoped to the graph's id, the script finds its own <svg>
through document.currentScript and only looks inside it, Ctrl-F is taken only while the pointer
is over that graph, and its URL keys become `PREFIX.x`, `PREFIX.y`, `PREFIX.s`.

Everything taken from the input (frame names, title, subtitle, unit) goes through jinja2's
autoescaping; characters XML 1.0 cannot carry (control characters, lone surrogates) become
U+FFFD.
"""
from __future__ import annotations

import contextlib
import gc
import hashlib
import json
import math
import re
from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass
from typing import NamedTuple

import jinja2

from lockdown.reports import palette as pal

Number = int | float
Path = tuple[str, ...]

XPAD = 10                # pixels left and right of the frames
FRAMEPAD = 1             # vertical gap between frames
CHAR_WIDTH = 0.59        # average glyph width in font sizes, for fitting labels
DEFAULT_TITLE = "Flame Graph"

_ENV = jinja2.Environment(loader=jinja2.PackageLoader("lockdown.reports", "templates"),
                          autoescape=True, undefined=jinja2.StrictUndefined,
                          trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True)
_XML_INVALID = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")
_PREFIX = re.compile(r"^[A-Za-z][A-Za-z0-9_-]*$")


@dataclass
class FlameOptions:
    title: str = DEFAULT_TITLE
    subtitle: str = ""
    width: int = 1200
    frame_height: int = 16
    minwidth: float = 0.1          # pixels; frames narrower are pruned (like --minwidth)
    reverse: bool = False          # merge stacks leaf-first (leaf as root), like --reverse
    inverted: bool = False         # icicle: root at the top, like --inverted
    count_name: str = "samples"    # unit word in tooltips
    palette: str = "php"           # "php" | "native" | "hot" (lockdown/reports/palette.py)
    search_color: str = "rgb(230,0,230)"
    builtins: Collection[str] | None = None   # PHP's internal functions/classes, exact builtins
    font_size: float = 12
    id_prefix: str | None = None   # prefix of every id; None: derived from input and options


class _Node:
    __slots__ = ("name", "total", "before", "children", "php")

    def __init__(self, name: str):
        self.name = name
        self.total: Number = 0        # width: the count (AFTER in a differential graph)
        self.before: Number = 0       # differential graphs: BEFORE, normalised
        self.children: dict[str, _Node] = {}
        self.php = False              # part of a PHP (Excimer) stack


class _Frame(NamedTuple):
    cls: str
    o: str
    s: str
    title: str
    x: str
    y: str
    w: str
    fill: str
    tx: str
    ty: str
    label: str


class _Key(NamedTuple):
    cls: str
    fill: str
    label: str
    x: str
    tx: str


@contextlib.contextmanager
def _no_gc() -> Iterator[None]:
    """The tree is hundreds of thousands of small objects and no cycles: the cyclic garbage
    collector's passes over it would double the time of a big graph."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def _count(stack: str, v: Number) -> Number:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise ValueError(f"count of stack {stack[:80]!r} is not a number: {v!r}")
    if not v >= 0 or math.isinf(v):
        raise ValueError(f"count of stack {stack[:80]!r} must be finite and >= 0, not {v!r}")
    return v


def _total(folded: Mapping[str, Number]) -> Number:
    return sum(_count(k, v) for k, v in folded.items())


def _build(folded: Mapping[str, Number], reverse: bool, php_context: bool,
           root: _Node | None = None) -> tuple[_Node, set[str]]:
    """Merge stacks into a tree. Returns it and the names that call something in PHP stacks
    (for the builtin heuristic, taken from the stacks as given, whatever `reverse`)."""
    root = root or _Node("all")
    callers: set[str] = set()
    for stack, v in folded.items():
        v = _count(stack, v)
        if not v:
            continue
        frames = stack.split(";")
        php = php_context and pal.is_php_root(frames[0])
        if php:
            callers.update(frames[:-1])
        if reverse:
            frames.reverse()
        root.total += v
        node = root
        for f in frames:
            child = node.children.get(f)
            if child is None:
                child = node.children[f] = _Node(f)
            child.total += v
            if php:
                child.php = True
            node = child
    return root, callers


def _add_before(root: _Node, before: Mapping[str, Number], scale: float, reverse: bool,
                create: bool) -> None:
    """Add BEFORE's (scaled) counts along each stack; without `create`, only to frames AFTER
    has: a frame only BEFORE has gets no width."""
    for stack, v in before.items():
        v = _count(stack, v) * scale
        if not v:
            continue
        frames = stack.split(";")
        if reverse:
            frames.reverse()
        root.before += v
        node = root
        for f in frames:
            child = node.children.get(f)
            if child is None:
                if not create:
                    break
                child = node.children[f] = _Node(f)
            child.before += v
            node = child


def _scale(before: Mapping[str, Number], after: Mapping[str, Number], normalize: bool) -> float:
    tb, ta = _total(before), _total(after)
    return ta / tb if normalize and tb > 0 else 1.0


def diff_frames(before: Mapping[str, Number], after: Mapping[str, Number], normalize: bool = True,
                reverse: bool = False) -> dict[Path, tuple[float, float]]:
    """Every frame of either input, by path from the root (`()` is the total; with `reverse`
    the paths start at the leaves), -> (BEFORE, AFTER) inclusive counts, BEFORE scaled to
    AFTER's total when `normalize`. The numbers `render_diff_flamegraph` colours by; frames
    with AFTER == 0 are the ones that vanish from its picture."""
    scale = _scale(before, after, normalize)
    with _no_gc():
        root, _ = _build(after, reverse, False)
        _add_before(root, before, scale, reverse, create=True)
        out: dict[Path, tuple[float, float]] = {}
        todo: list[tuple[Path, _Node]] = [((), root)]
        while todo:
            path, node = todo.pop()
            out[path] = (node.before, node.total)
            todo.extend((path + (name,), child) for name, child in node.children.items())
        return out


def _clean(s: str) -> str:
    return _XML_INVALID.sub("\ufffd", s)


def _px(v: float) -> str:
    s = f"{v:.2f}"
    if s.endswith("00"):
        return s[:-3]
    return s[:-1] if s.endswith("0") else s


def _raw(v: Number) -> str:
    """A count in data attributes: exact (JavaScript parses repr() of a float)."""
    if isinstance(v, float):
        return str(int(v)) if v.is_integer() and abs(v) < 2 ** 53 else repr(v)
    return str(v)


def _unit_for(shown: str, unit: str) -> str:
    """The unit word for a count as shown: "1 sample", "2 samples" (a plural unit in -s).
    Unit symbols of one or two letters stay as they are: "1 ms", not "1 m"."""
    return unit[:-1] if shown == "1" and len(unit) > 2 and unit.endswith("s") and not unit.endswith("ss") else unit


def count_text(v: Number) -> str:
    """A count for people: thousands separated, at most two decimals."""
    if isinstance(v, int) or float(v).is_integer():
        return f"{int(v):,}"
    if abs(v) < 1:
        return f"{v:.3g}"
    return f"{v:,.2f}".rstrip("0").rstrip(".")


def _fit(name: str, width: float, char_width: float) -> str:
    n = math.floor((width - 3) / char_width)
    if n < 3:
        return ""
    return name if len(name) <= n else name[:n - 2] + ".."


def _validate(opts: FlameOptions) -> None:
    if opts.palette not in pal.PALETTES:
        raise ValueError(f"palette must be one of {', '.join(pal.PALETTES)}, not {opts.palette!r}")
    if opts.width < 2 * XPAD + 10:
        raise ValueError(f"width must be at least {2 * XPAD + 10} pixels, not {opts.width}")
    if opts.frame_height < 2:
        raise ValueError(f"frame_height must be at least 2 pixels, not {opts.frame_height}")
    if not opts.font_size > 0:
        raise ValueError(f"font_size must be positive, not {opts.font_size}")
    if not opts.minwidth >= 0:
        raise ValueError(f"minwidth must be >= 0 pixels, not {opts.minwidth}")
    if " (" in opts.count_name:
        # The script finds a frame's name as everything before the last " (" of its tooltip.
        raise ValueError(f"count_name must not contain ' (': {opts.count_name!r}")
    if opts.id_prefix is not None and not _PREFIX.match(opts.id_prefix):
        raise ValueError(f"id_prefix must be a letter then letters, digits, '-' or '_', "
                         f"not {opts.id_prefix!r}")


def _auto_prefix(opts: FlameOptions, *inputs: Mapping[str, Number]) -> str:
    """A per-graph id prefix from the input and options: reproducible output, and different
    graphs on one page get different ids."""
    h = hashlib.blake2s(digest_size=5)
    fields = {k: v for k, v in vars(opts).items() if k != "builtins"}
    fields["builtins"] = None if opts.builtins is None else sorted(opts.builtins)
    h.update(json.dumps(fields, sort_keys=True, default=str).encode())
    for folded in inputs:
        h.update(b"\x01")
        for k in sorted(folded):
            h.update(k.encode("utf-8", "surrogatepass"))
            h.update(f"\x00{folded[k]!r}\n".encode())
    return "fg" + h.hexdigest()


_Placed = tuple[_Node, int, Number, int]    # node, depth, offset, its parent's index in the order


def _render(root: _Node, callers: set[str], opts: FlameOptions, prefix: str,
            diff_scale: float | None, negate: bool = False) -> str:
    """`negate`: a diff drawn with BEFORE's widths, `node.before` holding AFTER's counts."""
    diff = diff_scale is not None
    fs = opts.font_size
    fh = opts.frame_height
    width = opts.width
    plot_w = width - 2 * XPAD
    char_w = fs * CHAR_WIDTH
    total = root.total
    order, maxdepth, wpt = _placed(root, opts, plot_w)

    # Vertical geometry (flamegraph.pl's proportions): title, frames, details line, legend.
    top = 3 * fs + (2 * fs if opts.subtitle else 0)
    cats = _categories(order, root, callers, opts) if opts.palette != "hot" and not diff else []
    legend_items, legend_note = _legend_items(cats, diff_scale, negate)
    legend_h = fs + 8 if legend_items else 0
    bottom = 2 * fs + 10 + legend_h
    rows = maxdepth + 1 if order else 3
    height = top + rows * fh + bottom

    def y_of(depth: int) -> float:
        if opts.inverted:
            return top + depth * fh
        return height - bottom - (depth + 1) * fh + FRAMEPAD

    unit = _clean(opts.count_name)
    text_dy = (fh - FRAMEPAD) / 2 + fs / 4
    frames: list[_Frame] = []
    for i, (node, depth, off, _) in enumerate(order):
        name = _clean(node.name)
        x = XPAD + off * wpt
        w = node.total * wpt
        y = y_of(depth)
        info, fill, cls = _look(node, root, cats[i] if cats else None, total, unit, diff, negate)
        frames.append(_Frame(cls, _raw(off), _raw(node.total), info, _px(x), _px(y), _px(w), fill,
                             _px(x + 3), _px(y + text_dy), _fit(name, w, char_w)))

    legend: list[_Key] = []
    lx = float(XPAD)
    for cls, fill, label in legend_items:
        legend.append(_Key(cls, fill, label, _px(lx), _px(lx + 14)))
        lx += 14 + len(label) * char_w + 16
    details_y = height - legend_h - (fs + 5)
    return _ENV.get_template("flamegraph.svg.j2").render(
        p=prefix, diff=diff, width=width, height=_px(height), total=_raw(total), xpad=XPAD,
        plot_width=plot_w, char_width=_px(char_w), inverted=opts.inverted,
        search_color=opts.search_color, font_size=_px(fs), title_size=_px(fs + 5),
        center=_px(width / 2), title=_clean(_title(opts, diff)), title_y=_px(2 * fs),
        subtitle=_clean(opts.subtitle), subtitle_y=_px(4 * fs),
        clear_x=_px(width - XPAD - 160), search_x=_px(width - XPAD - 100),
        ic_x=_px(width - XPAD - 16), details_y=_px(details_y), empty=not order,
        empty_y=_px(top + 1.5 * fh + fs / 3), frames=frames, rect_height=_px(fh - FRAMEPAD),
        legend=legend, legend_box_y=_px(height - legend_h + 1),
        legend_y=_px(height - legend_h + 10),
        legend_note=legend_note, legend_note_x=_px(lx))


def _placed(root: _Node, opts: FlameOptions, plot_w: float) -> tuple[list[_Placed], int, float]:
    """Which frames are drawn, and where: preorder, siblings by name, own samples first;
    (the frames, the greatest depth, pixels per count)."""
    order: list[_Placed] = []
    maxdepth = 0
    if root.total <= 0:
        return order, maxdepth, 0.0
    wpt = plot_w / root.total
    min_count = opts.minwidth / wpt
    todo: list[_Placed] = [(root, 0, 0, -1)]
    while todo:
        node, depth, off, parent = todo.pop()
        me = len(order)
        order.append((node, depth, off, parent))
        maxdepth = max(maxdepth, depth)
        kids = node.children
        if not kids:
            continue
        o = off + max(node.total - sum(c.total for c in kids.values()), 0)
        keep = []
        for name in sorted(kids):
            c = kids[name]
            if c.total >= min_count and c.total > 0:
                keep.append((c, depth + 1, o, me))
            o += c.total
        todo.extend(reversed(keep))
    return order, maxdepth, wpt


def _title(opts: FlameOptions, diff: bool) -> str:
    title = opts.title
    if title == DEFAULT_TITLE:
        title = "Icicle Graph" if opts.inverted else title
        title = ("Differential " + title) if diff else title
    return title


def _categories(order: list[_Placed], root: _Node, callers: set[str], opts: FlameOptions) -> list[str]:
    """The palette category of each frame in `order` ("root" for the root)."""
    builtins = None if opts.builtins is None else {b.lower() for b in opts.builtins}
    seen: dict[tuple[str, bool], str] = {}

    def category(node: _Node) -> str:
        k = (node.name, node.php)
        cat = seen.get(k)
        if cat is None:
            cat = seen[k] = pal.classify(node.name, php=node.php and opts.palette == "php",
                                         leaf_only=node.name not in callers, builtins=builtins)
        return cat

    cats: list[str] = []
    for node, _, _, parent in order:
        cat = "root" if node is root else category(node)
        if parent > 0 and cats[parent] == "kernel" and not node.php and not opts.reverse:
            cat = "kernel"       # the kernel calls no user code
        cats.append(cat)
    return cats


def _legend_items(cats: list[str], diff_scale: float | None,
                  negate: bool) -> tuple[list[tuple[str, str, str]], str]:
    """The legend's keys, (class, fill, label), and its note."""
    if diff_scale is not None:
        items = [("fg-grew", pal.diff_color(1, 2), "grew"),
                 ("fg-shrank", pal.diff_color(2, 1), "shrank"),
                 ("fg-same", pal.diff_color(1, 1), "unchanged")]
        note = "widths: after"
        if diff_scale != 1:
            note += (f"; {'after' if negate else 'before'} scaled x{diff_scale:.4g} "
                     f"to the same total")
        return items, note
    present = set(cats)
    categories = [k for k in pal.CATEGORIES if k in present]
    return [("fg-" + k, pal.category_color(k, pal.CATEGORIES[k].label),
             pal.CATEGORIES[k].label) for k in categories], ""


def _look(node: _Node, root: _Node, cat: str | None, total: Number, unit: str, diff: bool,
          negate: bool) -> tuple[str, str, str]:
    """A frame's tooltip, fill and class: by its change in a diff, else by its category (`cat`;
    None: the hot palette)."""
    name = _clean(node.name)
    pct = f"{100 * node.total / total:.2f}%"
    shown = count_text(node.total)
    info = f"{name} ({shown} {_unit_for(shown, unit)}, {pct}"
    if diff:
        b, a = (node.total, node.before) if negate else (node.before, node.total)
        if math.isclose(a, b, rel_tol=1e-9):
            a = b        # scaled counts equal but for float rounding: unchanged, not -0.00%
        change = ("gone" if negate and a <= 0 else "new" if b <= 0
                  else f"{100 * (a - b) / b:+.2f}%")
        info += (f"; after {count_text(a)}, change {change})" if negate
                 else f"; before {count_text(b)}, change {change})")
        cls = ("fg-root" if node is root else "fg-grew" if a > b
               else "fg-shrank" if a < b else "fg-same")
        return info, pal.diff_color(b, a), cls
    info += ")"
    if cat is None:
        return info, pal.hot_color(node.name), ("fg-root" if node is root else "fg-hot")
    if node is root:
        return info, pal.ROOT_FILL, "fg-root"
    return info, pal.category_color(cat, node.name), "fg-" + cat


def render_flamegraph(folded: Mapping[str, Number], opts: FlameOptions = FlameOptions()) -> str:
    """Folded stacks `{"root;...;leaf": count}` -> a standalone SVG document (text)."""
    _validate(opts)
    prefix = opts.id_prefix or _auto_prefix(opts, folded)
    with _no_gc():
        root, callers = _build(folded, opts.reverse, opts.palette == "php")
        return _render(root, callers, opts, prefix, None)


def render_diff_flamegraph(before: Mapping[str, Number], after: Mapping[str, Number],
                           opts: FlameOptions = FlameOptions(), normalize: bool = True,
                           widths: str = "after") -> str:
    """A differential flame graph, as flamegraph.pl draws difffolded.pl output (with -n when
    `normalize`): the picture is AFTER's (widths from AFTER's counts); BEFORE's counts are
    scaled so both totals match when `normalize`; each frame is red where it grew, blue where
    it shrank, white where unchanged, more saturated the larger the relative change
    (palette.diff_intensity: 1 - smaller/larger). Tooltips read
    `name (AFTER samples, P%; before BEFORE, change +X%)` ("new" when BEFORE is 0).
    Frames that exist only in BEFORE have no width in AFTER and so are not drawn at all, as
    with flamegraph.pl; their parents show the loss in blue. `diff_frames` gives the numbers,
    including those frames. For the opposite view (what vanished), swap the inputs: the
    widths then come from BEFORE: or give `widths="before"` (flamegraph.pl's swapped inputs with
    --negate), which draws BEFORE's picture in the same colours (blue: shrank after, and frames
    that vanished entirely are deep blue), tooltips reading `after N, change X%` ("gone")."""
    _validate(opts)
    if widths not in ("after", "before"):
        raise ValueError(f"widths must be 'after' or 'before', not {widths!r}")
    scale = _scale(before, after, normalize)
    prefix = opts.id_prefix or _auto_prefix(opts, before, after,
                                            {"normalize": int(normalize), "widths": widths})
    with _no_gc():
        if widths == "before":
            back = 1 / scale if scale else 1.0
            root, callers = _build(before, opts.reverse, opts.palette == "php")
            _add_before(root, after, back, opts.reverse, create=False)
            return _render(root, callers, opts, prefix, back, negate=True)
        root, callers = _build(after, opts.reverse, opts.palette == "php")
        _add_before(root, before, scale, opts.reverse, create=False)
        return _render(root, callers, opts, prefix, scale)


# What a count of each kind of stack (analyzers/stacks.py) is, in flamegraph.pl's --countname
# words: perf's samples, or the nanoseconds of CPU their periods add up to (the folded output,
# as stackcollapse-perf.pl weighs them); Excimer's timer periods (a sample per period); the
# microseconds PHP spent off the CPU.
COUNT_NAMES = {("native", True): "samples", ("native", False): "ns", ("php", True): "samples",
               ("php", False): "samples", ("php-offcpu", True): "us", ("php-offcpu", False): "us"}


def count_name(kind: str, counts: bool = True) -> str:
    """The unit word of `kind`'s stacks as `stacks(..., counts=counts)` weighs them."""
    return COUNT_NAMES[(kind, counts)]


def php_builtins(php: dict) -> list[str] | None:
    """PHP's internal functions and classes from a bundle manifest's `php` facts, for
    FlameOptions.builtins (exact builtin colours); None when the capture did not record them."""
    if not php.get("internal_functions"):
        return None
    return [*php["internal_functions"], *php.get("internal_classes", [])]


def inline_svg(svg: str) -> str:
    """The SVG without its XML declaration, for pasting into an HTML page."""
    if svg.startswith("<?xml"):
        return svg[svg.index("?>") + 2:].lstrip("\n")
    return svg
