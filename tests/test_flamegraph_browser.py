"""The flame graph SVG in headless Chromium: click-zoom and reset, regex search with its
highlight and Matched %, and no script errors; standalone and inlined twice in one page."""

import pytest

from browser import headless_chromium, script_errors, wait_until, width
from lockdown.reports.flamegraph import FlameOptions, inline_svg, render_flamegraph

STACKS = {"main;WP::main;WP_Query->get_posts;mysqli_query": 30,
          "main;WP::main;WP_Query->get_posts;preg_match": 10,
          "main;WP::main;render;str_replace": 40,
          "main;wp_cache_get": 20}

pytestmark = pytest.mark.server     # Chromium through chromedriver


def frame(driver, svg_id, name):
    for g in driver.find_elements("css selector", f"#{svg_id} g.fg-f"):
        title = g.find_element("tag name", "title").get_attribute("textContent")
        if title.startswith(name + " ("):
            return g
    raise AssertionError(f"no frame {name} in {svg_id}")


def exercise(driver, svg_id):
    total = width(frame(driver, svg_id, "all"))
    before = width(frame(driver, svg_id, "WP_Query->get_posts"))
    assert abs(before / total - 0.4) < 0.01
    # click zoom: the clicked frame spans the graph, its sibling disappears
    frame(driver, svg_id, "WP_Query->get_posts").find_element("tag name", "rect").click()
    wait_until(lambda: width(frame(driver, svg_id, "WP_Query->get_posts")) > 0.95 * total)
    sibling = frame(driver, svg_id, "render")
    assert not sibling.is_displayed() or width(sibling) < 1
    assert driver.find_element("id", f"{svg_id}-unzoom").is_displayed()
    driver.find_element("id", f"{svg_id}-unzoom").click()
    wait_until(lambda: abs(width(frame(driver, svg_id, "WP_Query->get_posts")) - before) < 0.5)
    # regex search through the prompt: matches turn the search colour, Matched % is shown
    driver.find_element("id", f"{svg_id}-search").click()
    alert = driver.switch_to.alert
    alert.send_keys("^(mysqli_query|preg_match)$")
    alert.accept()
    color = driver.find_element("id", svg_id).get_attribute("data-search-color")

    def fill(name: str) -> str:
        return frame(driver, svg_id, name).find_element("tag name", "rect").get_attribute("fill")

    wait_until(lambda: fill("mysqli_query") == color)
    assert fill("preg_match") == color and fill("str_replace") != color
    matched = driver.find_element("id", f"{svg_id}-matched").get_attribute("textContent")
    assert "Matched: 40" in matched, matched      # (30 + 10) of 100 samples
    driver.find_element("id", f"{svg_id}-clear").click()
    wait_until(lambda: fill("mysqli_query") != color)


def test_standalone_svg(tmp_path):
    svg = tmp_path / "fg.svg"
    svg.write_text(render_flamegraph(STACKS, FlameOptions(id_prefix="fgA")))
    with headless_chromium() as driver:
        driver.get(svg.as_uri())
        exercise(driver, "fgA")
        assert script_errors(driver) == []


def test_two_graphs_inlined_in_one_html_page(tmp_path):
    page = tmp_path / "page.html"
    graphs = [inline_svg(render_flamegraph(STACKS, FlameOptions(id_prefix=p))) for p in ("fgA", "fgB")]
    page.write_text("<!doctype html><html><head><meta charset='utf-8'></head><body>"
                    + "".join(f"<div>{g}</div>" for g in graphs) + "</body></html>")
    with headless_chromium() as driver:
        driver.get(page.as_uri())
        exercise(driver, "fgB")
        # the other graph was not touched by zoom or search
        other = frame(driver, "fgA", "WP_Query->get_posts")
        assert abs(width(other) / width(frame(driver, "fgA", "all")) - 0.4) < 0.01
        exercise(driver, "fgA")
        assert script_errors(driver) == []
