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
