"""verify's page comparison (harness/responses.py): what counts as the same page, what is
masked (each arm's own address, the target's volatile patterns) and how a difference is shown."""
from lockdown.harness.responses import CONTEXT, compare_pages, first_difference, fit, learn_template, normalize
from lockdown.reports.verify_text import pages_line

MW = ('"wgRequestId":"[0-9a-f]+"', '<!-- Saved in parser cache .*?-->')


def test_volatile_parts_and_the_arm_address_are_masked():
    a = (b'<a href="http://127.0.0.1:4001/x">x</a>"wgRequestId":"7d03"<!-- Saved in parser cache '
         b'with key k and timestamp 20261122030833\n -->')
    b = (b'<a href="http://127.0.0.1:4002/x">x</a>"wgRequestId":"8945"<!-- Saved in parser cache '
         b'with key k and timestamp 20261122030859\n -->')
    na, nb = normalize(a, "http://127.0.0.1:4001/", MW), normalize(b, "http://127.0.0.1:4002/", MW)
    assert na == nb and "4001" not in na and "7d03" not in na
    # the address URL-encoded (WordPress's oEmbed discovery links) is the arm's too
    ea = b'url=http%3A%2F%2F127.0.0.1%3A4001%2F%3Fp%3D5'
    eb = b'url=http%3A%2F%2F127.0.0.1%3A4002%2F%3Fp%3D5'
    assert normalize(ea, "http://127.0.0.1:4001/", ()) == normalize(eb, "http://127.0.0.1:4002/", ())
    # without the patterns the request id tells them apart
    assert normalize(a, "http://127.0.0.1:4001/", ()) != normalize(b, "http://127.0.0.1:4002/", ())


def test_a_different_page_is_reported_with_where_it_parts():
    row = compare_pages((200, "<p>Hello, world</p>"), (200, "<p>Hello, there</p>"))
    assert row["same"] is False
    assert row["first_difference"]["offset"] == 10
    assert row["first_difference"]["before"].endswith("world</p>")
    assert row["first_difference"]["after"].endswith("there</p>")
    assert compare_pages((200, "same"), (200, "same")) == {"status_before": 200, "status_after": 200, "same": True}
    # a status change alone is a difference too
    assert compare_pages((200, "x"), (500, "x"))["same"] is False
    # a page cut short parts where the shorter one ends
    assert first_difference("abc", "abcdef")["offset"] == 3


def test_the_verdict_line_names_the_first_different_page():
    pages = [{"url": "/", "same": True, "status_before": 200, "status_after": 200},
             {"url": "/list", "same": False, "status_before": 200, "status_after": 200,
              "first_difference": {"offset": 42, "before": "a", "after": "b"}}]
    line = pages_line({"urls": 2, "same": 1, "volatile_patterns": 0, "pages": pages})
    assert line.startswith("1 of 2 URLs serve a different page after the fix: /list")
    assert "character 42" in line
    assert pages_line({"urls": 1, "same": 1, "volatile_patterns": 2, "pages": pages[:1]}).startswith(
        "all 1 URLs serve the same page before and after (volatile parts masked by 2")


def serve(pages):
    """A loopback HTTP server answering each path with pages[path](), in a thread."""
    import http.server
    import threading

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            body = pages[self.path]().encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def test_a_page_that_changes_by_itself_is_compared_without_its_changing_parts():
    """Two views of the before arm differ (an undeclared counter): the changing part is learned
    from them and masked, so the after arm is compared on the rest, and a real difference there
    is still one. A page that changes all over is unstable and left out, not blamed on the fix."""
    import uuid
    from types import SimpleNamespace

    from lockdown.harness.responses import compare_arms
    views = iter(range(100))
    text = "<p>" + "the same words on every view " * 4 + "</p>\n"
    before = serve({"/count": lambda: f"{text}<p>seen {next(views)} times</p>\n{text}",
                    "/count-changed": lambda: f"{text}<p>seen {next(views)} times</p>\n{text}",
                    "/noise": lambda: "\n".join(uuid.uuid4().hex for _ in range(20)),
                    "/same": lambda: "<p>a</p>", "/changed": lambda: "<p>old</p>"})
    after = serve({"/count": lambda: f"{text}<p>seen 0 times</p>\n{text}",
                   "/count-changed": lambda: f"{text}<p>seen 7 times</p>\n{text.upper()}",
                   "/noise": lambda: "\n".join(uuid.uuid4().hex for _ in range(20)),
                   "/same": lambda: "<p>a</p>", "/changed": lambda: "<p>new</p>"})
    try:
        stacks = {arm: SimpleNamespace(base_url=f"http://127.0.0.1:{srv.server_address[1]}")
                  for arm, srv in (("before", before), ("after", after))}
        got = compare_arms(stacks, ["/count", "/count-changed", "/noise", "/same", "/changed", "/same"], ())
    finally:
        before.shutdown()
        after.shutdown()
    rows = {r["url"]: r for r in got["pages"]}
    assert (got["urls"], got["same"], got["unstable"], got["learned"]) == (5, 2, 1, 2)
    assert rows["/count"]["same"] is True and rows["/count"]["learned_parts"] == 1
    assert rows["/count"]["views_differ"]["offset"] == len(text) + len("<p>seen ")
    # the counter is masked, the upper-cased text after it is not
    changed = rows["/count-changed"]
    assert changed["same"] is False
    assert changed["first_difference"]["offset"] == len(text) + len("<p>seen 7 times</p>\n<")
    assert changed["first_difference"]["after"][CONTEXT:].startswith("P>THE SAME WORDS ")
    assert rows["/noise"]["same"] is None and rows["/noise"]["unstable"]
    assert rows["/changed"]["same"] is False and rows["/same"]["same"] is True
    line = pages_line(got)
    assert line.startswith("2 of 5 URLs serve a different page after the fix: "
                           "/count-changed (first difference at character 145)")
    assert "2 URL(s) change by themselves between two views, in 2 part(s) masked" in line
    assert "1 URL(s) change from one view to the next by themselves too much to compare (first: /noise" in line


def test_a_clock_in_whole_seconds_that_ticks_between_the_arms_is_not_a_difference():
    """An Atom feed's <updated> in whole seconds: the before arm's two views, back to back, read
    the same second, and the after arm's view the next one. A third before view, taken after
    it, shows the clock moving: the page is compared without it (an audit app's /feed)."""
    from types import SimpleNamespace

    from lockdown.harness.responses import compare_arms
    feed = "<feed><title>Audit Blog</title><updated>{}</updated>" + "<entry>a post</entry>" * 10 + "</feed>"
    ticks = iter(["2024-05-01T12:00:00+00:00"] * 2 + ["2024-05-01T12:00:01+00:00"] * 10)
    before = serve({"/feed": lambda: feed.format(next(ticks))})
    after = serve({"/feed": lambda: feed.format("2024-05-01T12:00:01+00:00")})
    try:
        stacks = {arm: SimpleNamespace(base_url=f"http://127.0.0.1:{srv.server_address[1]}")
                  for arm, srv in (("before", before), ("after", after))}
        got = compare_arms(stacks, ["/feed"], ())
    finally:
        before.shutdown()
        after.shutdown()
    [row] = got["pages"]
    assert row["same"] is True and row["learned_parts"] == 1


PAD = "<p>" + "lorem ipsum dolor " * 12 + "</p>\n"


def test_what_changed_between_two_views_is_learned_as_whole_tokens():
    a = PAD + '<a href="/?nonce=abc123">x</a>\n<p>at 12:30:01</p>\n' + PAD
    b = PAD + '<a href="/?nonce=def456">x</a>\n<p>at 12:30:02</p>\n' + PAD
    fixed = learn_template(a, b)
    assert fixed == [PAD + '<a href="', '">x</a>\n<p>at ', "</p>\n" + PAD]
    # a third view with other values fits, even a minute that did not change between the two
    assert fit(fixed, PAD + '<a href="/?nonce=zz">x</a>\n<p>at 12:31:59</p>\n' + PAD) is None
    # text outside the learned parts must be the same
    where = fit(fixed, PAD + '<a href="/?nonce=zz">y</a>\n<p>at 12:31:59</p>\n' + PAD)
    assert where["offset"] == len(PAD) + len('<a href="/?nonce=zz">')
    assert where["before"].startswith('">x</a>') and where["after"][CONTEXT:].startswith("y</a>")
    # so must the end of the page
    where = fit(fixed, PAD + '<a href="/?nonce=zz">x</a>\n<p>at 12:31:59</p>\n'
                + PAD.replace("dolor </p>", "dolor</p>"))
    assert where is not None and where["after"].endswith("dolor</p>\n")


def test_a_one_line_page_is_learned_token_by_token():
    """Minified pages are one line: two nonces far apart are two parts, not one from the first
    to the second, so a change between them is still seen."""
    words = " ".join(f"w{i}" for i in range(200))
    a, b = f"<html>{words} n=aaa {words} n=bbb {words}</html>", f"<html>{words} n=ccc {words} n=ddd {words}</html>"
    fixed = learn_template(a, b)
    assert len(fixed) == 3
    assert fit(fixed, a.replace("aaa", "q").replace("bbb", "r")) is None
    where = fit(fixed, a.replace(" w150 ", " W150 ", 1))
    assert where is not None and where["after"].endswith(" W150 " + where["after"].split(" W150 ")[1])


def test_short_fixed_text_between_changed_parts_joins_them_and_too_much_change_is_not_learned():
    a = PAD + "<p>a1 b2 c3</p>\n" + PAD
    b = PAD + "<p>x9 y8 z7</p>\n" + PAD
    fixed = learn_template(a, b)
    assert fixed == [PAD + "<p>", "</p>\n" + PAD]
    assert learn_template("<p>12</p>", "<p>34</p>") is None         # over a fifth of the page changed
    assert learn_template(PAD + "x", PAD + "y") == [PAD, ""]
