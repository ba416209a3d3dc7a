"""What the report says it could not read, from plain report dicts: each kind of note, and none for
a clean run."""

from __future__ import annotations

from trainperf.ranks._report._notes import ranks_words, read_notes


def rank(r: int = 0, **fields) -> dict:
    return {"rank": r, "folder": f"rank-{r}", **fields}


def test_a_clean_run_has_no_note():
    assert read_notes({"ranks": [rank(0), rank(1, skipped={"windows": 0}, attempts_total=1, window_stride=1,
                                                      spans_not_read=0, unreadable={}, duplicates=[])]}) == []
    assert read_notes({"ranks": [rank(0, attempts_total=0, window_stride=None)], "missing_ranks_total": 0}) == []


def test_missing_ranks_are_listed_as_ranges_and_the_rest_counted():
    twenty = [[4 * k, 4 * k + 1] for k in range(20)]  # as many ranges as the report lists; 40 ranks
    report = {"ranks": [rank(150)], "missing_ranks": twenty, "missing_ranks_total": 120}
    assert read_notes(report) == ["ranks " + ", ".join(f"{a}-{b}" for a, b in twenty) + " and 80 more absent "
                                  "(120 ranks without a folder)"]
    report = {"ranks": [rank(3)], "missing_ranks": [[0, 2]], "missing_ranks_total": 3}
    assert read_notes(report) == ["ranks 0-2 absent (3 ranks without a folder)"]
    report = {"ranks": [rank(1)], "missing_ranks": [[0, 0]], "missing_ranks_total": 1}
    assert read_notes(report) == ["rank 0 absent (1 rank without a folder)"]


def test_folders_left_out_are_named_with_why_and_the_rest_counted():
    report = {"ranks": [rank(0)], "ignored_folders": [{"name": "rank-x\n", "why": "not rank-<number> (digits 0-9)"}],
              "ignored_folders_total": 3}
    assert read_notes(report) == ["folder 'rank-x\\n' left out: not rank-<number> (digits 0-9)",
                                  "2 more folders named like a rank left out"]


def test_each_rank_note_in_order():
    notes = read_notes({"ranks": [rank(
        2, duplicates=["rank-02", "rank-002"], skipped={"windows": 3, "timeline": 0, "clock": 1},
        unreadable={"events.jsonl": "a FIFO, not read", "clock.jsonl": "Permission denied"}, window_stride=4,
        spans_not_read=1234,
        attempts=[{"first": 1, "last": 50, "windows": 5}, {"first": 1, "last": 8, "windows": 2},
                  {"first": 2, "last": 30, "windows": 3}], attempts_total=3,
    )]})
    assert notes == [
        "rank 2: folder rank-02 names the same rank as rank-2; only rank-2 was read",
        "rank 2: folder rank-002 names the same rank as rank-2; only rank-2 was read",
        "rank 2: skipped 3 lines of windows, 1 line of clock (cut, not JSON, or values no run writes)",
        "rank 2: events.jsonl could not be read: a FIFO, not read",
        "rank 2: clock.jsonl could not be read: Permission denied",
        "rank 2: more windows than the report holds; one in 4 was read, over the whole run",
        "rank 2: 1,234 spans of the timeline beyond what the report holds were not read",
        "rank 2: 3 runs wrote into its folder (restarted); the report reads the last, iterations 2-30; earlier: "
        "iterations 1-50 (5 windows); iterations 1-8 (2 windows)",
    ]


def test_one_run_and_a_stride_of_one_say_nothing():
    notes = read_notes({"ranks": [rank(0, attempts=[{"first": 1, "last": 9, "windows": 9}], attempts_total=1,
                                       window_stride=1, spans_not_read=0)]})
    assert notes == []


def test_untimed_collectives_come_first_one_line_per_reason_with_their_ranks():
    report = {"ranks": [rank(0)], "missing_ranks": [[3, 3]], "missing_ranks_total": 1,
              "collectives_untimed": [{"why": "FSDP2: fully_shard", "ranks": [0, 1, 2]},
                                      {"why": "FSDP: FullyShardedDataParallel", "ranks": [4]}]}
    tail = ("stragglers are named only from what precedes the collectives (data wait, host time after the step, "
            "GC); a late forward pass, backward pass or optimizer step names no rank")
    assert read_notes(report) == [f"collectives not timed (FSDP2: fully_shard) on ranks 0-2: {tail}",
                                  f"collectives not timed (FSDP: FullyShardedDataParallel) on rank 4: {tail}",
                                  "rank 3 absent (1 rank without a folder)"]


def test_ranks_are_named_as_ranges_and_past_twenty_ranges_counted():
    assert ranks_words([5, 0, 1, 2, 7, 8]) == "ranks 0-2, 5, 7-8"
    assert ranks_words([3]) == "rank 3"
    assert ranks_words(list(range(0, 60, 2))) == "ranks " + ", ".join(map(str, range(0, 40, 2))) + " and 10 more"
