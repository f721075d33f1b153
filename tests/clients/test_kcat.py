"""kcat (Debian's build, librdkafka 2.0.2 inside: an older client than the
wheel's) against Oxbow: produce 100k+ keyed lines with headers and every
codec, consume them back, list metadata and query offsets by timestamp."""

from __future__ import annotations

import re
import shutil
import subprocess
import time

from oxbow_harness import create_topic

KCAT = shutil.which("kcat") or "/usr/bin/kcat"
CODECS = ("gzip", "snappy", "lz4", "zstd")
PARTITIONS = 4
LINES_PER_RUN = 6250          # 4 codecs x 4 partitions x 6250 = 100,000
KEYED_RUN_LINES = 4000        # one more run spread by kcat's own partitioner
TOPIC = "kcat-topic"


def now_ms() -> int:
    return int(time.time() * 1000)


def kcat(args: list[str], stdin: bytes | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    proc = subprocess.run([KCAT, *args], input=stdin, capture_output=True, timeout=timeout)
    assert proc.returncode == 0, (
        f"kcat {' '.join(args)} exited {proc.returncode}\n"
        f"stderr: {proc.stderr.decode(errors='replace')[-3000:]}"
    )
    return proc


def line_value(tag: str, j: int) -> str:
    # Varied size, no tab / newline / comma.
    return f"{tag}|{j}|" + ("abcdefghijklmnopqrstuvwxyz0123456789" * 12)[: (j * 37) % 300]


def produce_run(bootstrap: str, codec: str, partition: int | None, tag: str, n: int) -> tuple[int, int, dict]:
    """One kcat -P invocation; returns (ts_before, ts_after, {key: value})."""
    expected = {}
    lines = []
    for j in range(n):
        key, value = f"{tag}-{j}", line_value(tag, j)
        expected[key] = value
        lines.append(f"{key}\t{value}")
    args = ["-P", "-b", bootstrap, "-t", TOPIC, "-K", "\\t", "-z", codec,
            "-H", f"codec={codec}", "-H", f"run={tag}",
            "-X", "linger.ms=5", "-X", "enable.idempotence=true", "-m", "30"]
    if partition is not None:
        args += ["-p", str(partition)]
    before = now_ms()
    kcat(args, stdin=("\n".join(lines) + "\n").encode())
    after = now_ms()
    return before, after, expected


def test_kcat_produce_consume_metadata_query(broker):
    create_topic(broker, TOPIC, PARTITIONS)
    bs = broker.bootstrap

    runs = {}         # tag -> (codec, partition|None, ts_before, ts_after, expected)
    cuts = []         # (ts, {partition: expected offset}) taken between codec groups
    produced_per_part = {p: 0 for p in range(PARTITIONS)}
    for codec in CODECS:
        if produced_per_part[0]:
            time.sleep(0.01)
            cut = now_ms()
            time.sleep(0.01)
            cuts.append((cut, dict(produced_per_part)))
        for p in range(PARTITIONS):
            tag = f"{codec}-p{p}"
            before, after, expected = produce_run(bs, codec, p, tag, LINES_PER_RUN)
            runs[tag] = (codec, p, before, after, expected)
            produced_per_part[p] += LINES_PER_RUN
    before, after, expected = produce_run(bs, "lz4", None, "keyed", KEYED_RUN_LINES)
    runs["keyed"] = ("lz4", None, before, after, expected)
    total = sum(len(r[4]) for r in runs.values())
    assert total >= 100_000

    # --- consume everything back -------------------------------------------------
    fmt = "%p\\t%o\\t%T\\t%k\\t%s\\t%h\\n"
    out = kcat(["-C", "-b", bs, "-t", TOPIC, "-o", "beginning", "-e", "-q", "-m", "30", "-f", fmt],
               timeout=180).stdout.decode()
    lines = out.split("\n")
    assert lines[-1] == "", "kcat output does not end in a newline"
    lines = lines[:-1]
    assert len(lines) == total, f"kcat consumed {len(lines)} records, produced {total}"

    by_part: dict[int, list] = {p: [] for p in range(PARTITIONS)}
    seen: dict[str, tuple] = {}
    for line in lines:
        fields = line.split("\t")
        assert len(fields) == 6, f"unparseable kcat line: {line[:200]!r}"
        p, off, ts, key, value, hdrs = int(fields[0]), int(fields[1]), int(fields[2]), *fields[3:]
        assert key not in seen, f"key {key} consumed twice: {seen[key]} and {(p, off)}"
        seen[key] = (p, off)
        tag = key.rsplit("-", 1)[0]
        assert tag in runs, f"unexpected key {key!r}"
        codec, run_p, before, after, expected = runs[tag]
        assert value == expected[key], f"{key}: value {value[:60]!r}"
        assert hdrs == f"codec={codec},run={tag}", f"{key}: headers {hdrs!r}"
        if run_p is not None:
            assert p == run_p, f"{key}: in partition {p}, produced with -p {run_p}"
        assert before <= ts <= after, f"{key}: CreateTime {ts} outside its run [{before}, {after}]"
        by_part[p].append((off, key, ts))
    assert set(seen) == {k for r in runs.values() for k in r[4]}

    for p, recs in by_part.items():
        offsets = [o for o, _, _ in recs]
        assert offsets == list(range(len(recs))), \
            f"partition {p}: offsets not contiguous from 0 (first mismatch at " \
            f"{next(i for i, o in enumerate(offsets) if o != i)})"
        # Within one run, kcat preserves line order per partition.
        last_j: dict[str, int] = {}
        for _, key, _ in recs:
            tag, j = key.rsplit("-", 1)
            assert int(j) > last_j.get(tag, -1), f"partition {p}: {key} out of order"
            last_j[tag] = int(j)

    # --- metadata ----------------------------------------------------------------
    md = kcat(["-L", "-b", bs, "-t", TOPIC, "-m", "30"]).stdout.decode()
    m = re.search(r'topic "%s" with (\d+) partitions:(.*)' % re.escape(TOPIC), md)
    assert m, f"kcat -L does not list {TOPIC}:\n{md}"
    assert int(m.group(1)) == PARTITIONS and m.group(2).strip() == "", md
    parts = re.findall(r"partition (\d+), leader (-?\d+), replicas: ([\d,]*), isrs: ([\d,]*)(.*)", md)
    assert sorted(int(x[0]) for x in parts) == list(range(PARTITIONS)), md
    for _, leader, replicas, isrs, err in parts:
        assert int(leader) >= 0 and replicas == leader and isrs == leader and err.strip() == "", md
    assert re.search(r"broker \d+ at 127\.0\.0\.1:%d" % broker.port, md), md

    # --- query offsets by timestamp (ListOffsets) --------------------------------
    def query(ts: int) -> dict[int, int]:
        args = ["-Q", "-b", bs, "-m", "30"]
        for p in range(PARTITIONS):
            args += ["-t", f"{TOPIC}:{p}:{ts}"]
        text = kcat(args).stdout.decode()
        got = {}
        for p, off, err in re.findall(r"^%s \[(\d+)\] offset (-?\d+)(.*)$" % re.escape(TOPIC), text, re.M):
            assert err.strip() == "", f"kcat -Q error for partition {p}: {err}"
            got[int(p)] = int(off)
        assert sorted(got) == list(range(PARTITIONS)), f"kcat -Q output:\n{text}"
        return got

    def first_at_or_after(p: int, ts: int) -> int:
        return min((o for o, _, t in by_part[p] if t >= ts), default=-1)

    assert len(cuts) == len(CODECS) - 1
    for cut, expected_offsets in cuts:
        got = query(cut)
        for p in range(PARTITIONS):
            assert first_at_or_after(p, cut) == expected_offsets[p], "test bug: cut not between runs"
            assert got[p] == expected_offsets[p], \
                f"kcat -Q {TOPIC}:{p}:{cut} -> {got[p]}, expected {expected_offsets[p]}"
    assert query(0) == {p: 0 for p in range(PARTITIONS)}
    assert query(now_ms() + 3_600_000) == {p: -1 for p in range(PARTITIONS)}
    # An exact record timestamp from the middle of partition 2.
    mid_off, _, mid_ts = by_part[2][len(by_part[2]) // 2]
    assert query(mid_ts)[2] == first_at_or_after(2, mid_ts) <= mid_off
