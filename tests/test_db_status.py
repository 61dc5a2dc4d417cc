"""MariaDB's status counters over a capture: differences, sums, and what they say per request."""
from __future__ import annotations

from lockdown.analyzers.db_status import summarize
from lockdown.collectors.server_status import difference, summed, without


def test_differences_leave_out_counters_that_went_back_or_are_missing():
    before = {"Questions": 100, "Connections": 10, "Sort_rows": 50}
    after = {"Questions": 160, "Connections": 4, "Created_tmp_tables": 3}      # FLUSH STATUS; new counter
    assert difference(before, after) == {"Questions": 60}
    assert summed([{"Questions": 60, "Sort_rows": 1}, {"Questions": 40}]) == {"Questions": 100}
    assert summed([]) == {}
    # a status read counts itself (a temporary table, a scan, a connection): taken out once per slice
    footprint = {"Created_tmp_tables": 1, "Select_scan": 1, "Connections": 1}
    assert without({"Created_tmp_tables": 115, "Select_scan": 0, "Questions": 9}, footprint) == {
        "Created_tmp_tables": 114, "Select_scan": 0, "Questions": 9}


def counters(**over):
    base = {"Innodb_buffer_pool_read_requests": 400_000, "Innodb_buffer_pool_reads": 0,
            "Created_tmp_tables": 300, "Created_tmp_disk_tables": 0, "Sort_merge_passes": 0,
            "Handler_read_rnd_next": 50_000, "Handler_read_key": 20_000, "Select_full_join": 0,
            "Connections": 200, "Threads_created": 2, "Table_open_cache_misses": 0, "Opened_tables": 0,
            "Innodb_row_lock_waits": 0, "Innodb_row_lock_time": 0}
    return {**base, **over}


def test_a_healthy_capture_flags_nothing():
    s = summarize({"private": True, "status": {"requests": 100, "counters": counters()}})
    assert (s.requests, s.buffer_pool_hit_pct, s.tmp_disk_pct, s.threads_per_connection) == (100, 100.0, 0.0, 0.01)
    assert s.per_request["Created_tmp_tables"] == 3 and s.per_request["Handler_read_rnd_next"] == 500
    assert not [c.name for c in s.checks if c.flagged]
    [pool] = [c for c in s.checks if c.name == "buffer pool"]
    assert pool.value == "100.00% of 4,000 page reads a request from memory, 0.00 from disk"


def test_each_limit_a_setting_causes_is_flagged_with_that_setting():
    s = summarize({"private": False, "status": {"requests": 100, "counters": counters(
        Innodb_buffer_pool_reads=4_000, Created_tmp_disk_tables=100, Sort_merge_passes=5, Select_full_join=100,
        Threads_created=200, Table_open_cache_misses=30, Innodb_row_lock_waits=20, Innodb_row_lock_time=900)}})
    flagged = {c.name: c.setting for c in s.checks if c.flagged}
    assert set(flagged) == {"buffer pool", "temporary tables", "sort merge passes", "joins without an index",
                            "connections", "table cache", "row lock waits"}
    assert flagged["buffer pool"].startswith("innodb_buffer_pool_size") and s.buffer_pool_hit_pct == 99.0
    assert flagged["connections"].startswith("thread_cache_size") and s.threads_per_connection == 1.0
    assert s.tmp_disk_pct == 33.33 and not s.private


def test_no_counters_no_summary():
    assert summarize(None) is None and summarize({"private": True}) is None
    assert summarize({"status": {"requests": 0, "counters": counters()}}) is None
    assert summarize({"status": {"requests": 5, "counters": {}}}) is None
    bare = summarize({"status": {"requests": 5, "counters": {"Questions": 50}}})
    assert bare.checks == [] and bare.per_request == {"Questions": 10} and bare.buffer_pool_hit_pct is None


def test_a_counter_that_did_not_move_counts_zero_and_slices_sum_whatever_their_order():
    assert difference({"Questions": 7, "Select_scan": 3}, {"Questions": 7, "Select_scan": 5}) == {
        "Questions": 0, "Select_scan": 2}
    # a counter is summed only when every slice has it, the first one included
    assert summed([{"Questions": 40}, {"Questions": 60, "Sort_rows": 1}]) == {"Questions": 100}
    assert summed([{"Sort_rows": 2, "Questions": 5}]) == {"Questions": 5, "Sort_rows": 2}
    assert list(summed([{"Sort_rows": 2, "Questions": 5, "Connections": 1}] * 2)) == [
        "Connections", "Questions", "Sort_rows"]
    assert without({"Connections": 0, "Questions": 3}, {"Connections": 1, "Questions": 1}) == {
        "Connections": 0, "Questions": 2}


def test_per_request_figures_are_rounded_and_sorted_and_missing_counters_count_zero():
    s = summarize({"private": True, "status": {"requests": 3, "counters": {
        "Questions": 10, "Innodb_buffer_pool_read_requests": 3_000, "Created_tmp_tables": 3,
        "Connections": 3, "Threads_created": 2, "Handler_read_rnd_next": 1_500, "Table_open_cache_misses": 1,
        "Innodb_row_lock_waits": 3}}})
    assert list(s.per_request) == sorted(s.per_request) and s.per_request["Questions"] == 3.3333
    # no Innodb_buffer_pool_reads, Created_tmp_disk_tables, Threads_created... counted as none
    assert (s.buffer_pool_hit_pct, s.tmp_disk_pct, s.threads_per_connection) == (100.0, 0.0, 0.667)
    assert {c.name: (c.value, c.flagged) for c in s.checks} == {
        "buffer pool": ("100.00% of 1,000 page reads a request from memory, 0.00 from disk", False),
        "temporary tables": ("1.00 a request, 0.00 on disk", False),
        "rows read by table scans": ("500 a request (Handler_read_rnd_next; index lookups: 0)", False),
        "connections": ("1.00 a request, 0.67 new server threads per connection", True),
        "table cache": ("0.33 misses a request (0.00 tables opened)", True),
        "row lock waits": ("1.00 a request, 0.00 ms", True)}
    assert s.to_json()["checks"][0] == {"name": "buffer pool", "value": s.checks[0].value, "flagged": False,
                                        "setting": s.checks[0].setting}
    assert s.to_json()["threads_per_connection"] == 0.667 and s.to_json()["per_request"] == s.per_request
    s = summarize({"private": True, "status": {"requests": 3, "counters": {
        "Innodb_buffer_pool_read_requests": 3_000, "Innodb_buffer_pool_reads": 1, "Connections": 2}}})
    assert s.buffer_pool_hit_pct == 99.97 and s.threads_per_connection == 0.0
    assert s.tmp_disk_pct is None                              # no temporary tables at all: no share


def flags(**over):
    s = summarize({"private": True, "status": {"requests": 100, "counters": counters(**over)}})
    return {c.name for c in s.checks if c.flagged}


def test_each_flag_starts_at_its_documented_threshold():
    # one page a request read from disk
    assert flags(Innodb_buffer_pool_reads=100) == {"buffer pool"} and flags(Innodb_buffer_pool_reads=99) == set()
    assert flags(Created_tmp_disk_tables=1) == {"temporary tables"} and flags(Sort_merge_passes=1) == {
        "sort merge passes"}
    assert flags(Select_full_join=1) == {"joins without an index"} and flags(Innodb_row_lock_waits=1) == {
        "row lock waits"}
    # a table cache miss every ten requests
    assert flags(Table_open_cache_misses=10) == {"table cache"} and flags(Table_open_cache_misses=9) == set()
    # half a connection a request, each starting half a thread or more
    assert flags(Connections=50, Threads_created=25) == {"connections"}
    assert flags(Connections=49, Threads_created=49) == set() and flags(Connections=100, Threads_created=49) == set()
    assert flags(Handler_read_rnd_next=10**9) == set()           # table scans are shown, never flagged


def test_the_lines_mark_what_is_flagged_with_the_setting_to_look_at():
    from lockdown.reports.analysis_text import database_status_lines
    d = summarize({"private": True, "status": {"requests": 100, "counters": counters(Sort_merge_passes=5)}}).to_json()
    lines = database_status_lines(d)
    assert lines[:2] == [
        "", "database server over the capture (SHOW GLOBAL STATUS differences, per timed request, 100 requests; "
            "lockdown's private server; lockdown's own status reads taken out, its marker statement (one a request) "
            "counts in Questions, bytes and connections):"]
    assert lines[2:5] == [
        "    buffer pool              100.00% of 4,000 page reads a request from memory, 0.00 from disk",
        "    temporary tables         3.00 a request, 0.00 on disk",
        "  ! sort merge passes        0.05 a request; look at sort_buffer_size, or sorting fewer or narrower rows"]
    assert len(lines) == 2 + 8
    shared = database_status_lines({**d, "private": False})
    assert "100 requests; a shared server: other clients count too; lockdown's own" in shared[1]
    assert database_status_lines(None) == database_status_lines({}) == []
    from lockdown.reports.analysis_text import notable_lines
    assert notable_lines({"database_status": d}) == [
        "  database server: sort merge passes (its counters over the capture)"]


def test_a_rare_event_is_flagged_and_shown_not_rounded_away():
    """One disk table, merge pass, full join and lock wait in 300 requests: each flagged, and
    shown as 0.0033 a request, not 0.00 (helper-28)."""
    s = summarize({"private": True, "status": {"requests": 300, "counters": {
        "Created_tmp_tables": 300, "Created_tmp_disk_tables": 1, "Sort_merge_passes": 1,
        "Select_full_join": 1, "Innodb_row_lock_waits": 1, "Innodb_row_lock_time": 40}}})
    rows = {c.name: (c.value, c.flagged) for c in s.checks}
    assert rows["temporary tables"] == ("1.00 a request, 0.0033 on disk", True)
    assert rows["sort merge passes"] == ("0.0033 a request", True)
    assert rows["joins without an index"] == ("0.0033 a request", True)
    assert rows["row lock waits"] == ("0.0033 a request, 0.13 ms", True)
