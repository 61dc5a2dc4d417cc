"""verify's page comparison (harness/responses.py): what counts as the same page, what is
masked (each arm's own address, the target's volatile patterns) and how a difference is shown."""
from lockdown.harness.responses import compare_pages, first_difference, normalize
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


def test_a_page_that_changes_by_itself_is_unstable_not_different():
    """Two views of the before arm differ (an undeclared counter): the URL is reported as
    unstable and left out, instead of blaming the fix; a real difference is still one."""
    from types import SimpleNamespace

    from lockdown.harness.responses import compare_arms
    views = iter(range(100))
    before = serve({"/count": lambda: f"<p>seen {next(views)} times</p>", "/same": lambda: "<p>a</p>",
                    "/changed": lambda: "<p>old</p>"})
    after = serve({"/count": lambda: "<p>seen 0 times</p>", "/same": lambda: "<p>a</p>",
                   "/changed": lambda: "<p>new</p>"})
    try:
        stacks = {arm: SimpleNamespace(base_url=f"http://127.0.0.1:{srv.server_address[1]}")
                  for arm, srv in (("before", before), ("after", after))}
        got = compare_arms(stacks, ["/count", "/same", "/changed", "/same"], ())
    finally:
        before.shutdown()
        after.shutdown()
    rows = {r["url"]: r for r in got["pages"]}
    assert (got["urls"], got["same"], got["unstable"]) == (3, 1, 1)
    assert rows["/count"]["same"] is None and rows["/count"]["views_differ"]["offset"] == 8
    assert rows["/changed"]["same"] is False and rows["/same"]["same"] is True
    line = pages_line(got)
    assert line.startswith("1 of 3 URLs serve a different page after the fix: /changed")
    assert "1 URL(s) change from one view to the next by themselves and were not compared (first: /count" in line
