#!/usr/bin/env python3
"""Where Oxbow's CPU goes in one workload, by `perf record` (sampling every thread of every
node), summarised as the top functions and the share of each thread kind.

  replicated-produce  three nodes, a topic of 16 partitions with RF 3 and min.insync.replicas 2,
                      rdkafka_performance producing 1 KiB records with acks=all (idempotent)
  consume             one node, 16 partitions filled first, then read from the beginning by
                      rdkafka_performance -C (the sampling covers the read only)

The broker binary is what OXBOW_BROKER_BIN names (default: the release build). A release build
names functions but not lines or inlined frames; `cargo build --profile profiling -p
oxbow-server` gives line tables (docs/benchmarks.md, Profiling the broker).

Usage: tests/bench/profile_broker.py WORKLOAD [--records N] [--top K] [--out FILE]
"""

import argparse
import collections
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench  # noqa: E402

NO_PERF = False


def perf_report(data: Path, top: int) -> str:
    """The top functions by self time, and the samples per thread name."""
    r = subprocess.run(["perf", "report", "-i", str(data), "--no-children", "--sort", "symbol", "--stdio",
                        "--percent-limit", "0.7", "-g", "none"], capture_output=True, text=True)
    rows = [re.sub(r"[\s-]+$", "", l) for l in r.stdout.splitlines() if re.match(r"\s+[\d.]+%", l)][:top]
    kernel = sum(float(l.split("%")[0]) for l in rows if "[k]" in l)
    s = subprocess.run(["perf", "script", "-i", str(data), "-F", "comm"], capture_output=True, text=True)
    threads = collections.Counter(re.sub(r"[-_]?\d+$", "", l.strip()) for l in s.stdout.splitlines() if l.strip())
    total = sum(threads.values()) or 1
    lines = ["top functions (self time, all nodes; [k] kernel, [.] user space):", *rows,
             f"(the kernel's share of the functions listed: {kernel:.1f}%)", "", "samples by thread name:"]
    lines += [f"  {100 * n / total:5.1f}%  {name}" for name, n in threads.most_common(12)]
    return "\n".join(lines)


def record(pids: list[int], data: Path, run) -> None:
    """Samples `pids` at 999 Hz with call graphs while `run()` runs (only runs it with --no-perf)."""
    if NO_PERF:
        run()
        return
    perf = subprocess.Popen(["perf", "record", "-F", "999", "-g", "-o", str(data), "-p", ",".join(map(str, pids))],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        run()
    finally:
        perf.send_signal(2)
        perf.wait(60)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("workload", choices=["replicated-produce", "consume"])
    ap.add_argument("--records", type=int, default=2_000_000)
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--out", help="also write the summary here")
    ap.add_argument("--no-perf", action="store_true", help="only the workload's figures (no sampling)")
    ap.add_argument("--broker-env", action="append", default=[], metavar="KEY=VALUE",
                    help="an environment variable for the brokers only (not the clients)")
    args = ap.parse_args()
    bench.Oxbow.env = dict(kv.split("=", 1) for kv in args.broker_env)
    global NO_PERF
    NO_PERF = args.no_perf
    bench.RDKAFKA_PERF = bench.rdkafka_performance()
    bench.Oxbow.binary = bench.oxbow_binary(False)
    cp = bench.java_classpath()
    w = bench.Produce(1024, "all", 16, "none", args.records, "librdkafka",
                      replicas=3 if args.workload == "replicated-produce" else 1)
    res = bench.Results()
    with tempfile.TemporaryDirectory(prefix="oxbow-profile-") as tmp:
        data = Path(tmp) / "perf.data"
        if args.workload == "replicated-produce":
            nodes = bench.Nodes("oxbow", Path(tmp), cp, 3)
            try:
                nodes.start()
                record([p.pid for p in nodes.procs.values()], data,
                       lambda: bench.run_produce_rdkafka(nodes, w, "profiled", res))
                res.add("whole run, three nodes", "peak RSS", "MiB", "lower", "oxbow", nodes.stats()[1] / 1024)
            finally:
                nodes.stop()
        else:
            b = bench.Oxbow(Path(tmp), cp)
            try:
                b.start()
                bench.run_produce_rdkafka(b, w, "profiled", res)
                record([b.proc.pid], data, lambda: bench.run_consume_rdkafka(b, "profiled", w, False, res))
                res.add("whole run", "peak RSS", "MiB", "lower", "oxbow", b.stats()[1] / 1024)
            finally:
                b.stop()
        summary = [f"{args.workload}: {w.records} records of 1 KiB, {os.environ.get('OXBOW_BROKER_BIN', 'release build')}"]
        for (workload, metric, unit, _), v in res.values.items():
            summary.append(f"  {workload}: {metric} {v['oxbow'][0]:,.1f} {unit}")
        text = "\n".join(summary) + "\n" + ("" if NO_PERF else "\n" + perf_report(data, args.top) + "\n")
    print(text)
    if args.out:
        Path(args.out).write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
