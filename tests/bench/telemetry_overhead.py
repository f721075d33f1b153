"""What exporting telemetry costs a broker: Oxbow's produce throughput with OTLP export off, with
metrics only, and with metrics and traces at the default sampling, on this machine, in one run
(issue 20's target: under 2%).

Rounds rotate the three modes' order; each run starts a fresh single-node broker, runs the same
produce workloads as tests/bench/bench.py (librdkafka's rdkafka_performance and Kafka's
ProducerPerformance, 1 KiB records, acks=1 and acks=all, and librdkafka with lz4 batches, plain
and with an unsampled `traceparent` header on every record) and stops it. Metrics are exported
every second (OTEL_METRIC_EXPORT_INTERVAL=1000, fifteen times the rate docs/observability.md
recommends); traces at the broker's default sampler (parentbased_traceidratio, 1% of requests:
each request still gets a span id and a sampling decision, and a produce request's records are
read for trace context). Both go to an OTLP/HTTP receiver in this process
(tests/k8s/otlp_sink.py, official OTLP protobufs), which checks that they arrive. Medians;
ratios are each mode's over "export off".

    tests/bench/telemetry-overhead --out docs/bench/telemetry-overhead.md [--rounds 3] [--records 500000]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import bench
from bench import Oxbow, Produce, Results, free_port, log, run_produce

sys.path.insert(0, str(bench.ROOT / "tests" / "k8s"))
from otlp_sink import Sink  # noqa: E402


class Quiet(Oxbow):
    name = "export off"


class Metrics(Oxbow):
    name = "metrics"


class Traces(Oxbow):
    name = "metrics + traces"


MODES = (Quiet, Metrics, Traces)

UNSAMPLED = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="Markdown report path; JSON goes beside it (.json)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--records", type=int, default=500_000, help="1 KiB records per produce run")
    ap.add_argument("--no-build", action="store_true", help="use the existing oxbow-broker binary")
    args = ap.parse_args()
    t0 = time.monotonic()
    cp = bench.java_classpath()
    bench.RDKAFKA_PERF = bench.rdkafka_performance()
    Oxbow.binary = bench.oxbow_binary(not args.no_build)
    port = free_port()
    sink = Sink("127.0.0.1", port)
    Metrics.env = {"OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{port}", "OTEL_METRIC_EXPORT_INTERVAL": "1000",
                   "OTEL_TRACES_EXPORTER": "none"}
    Traces.env = {"OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{port}", "OTEL_METRIC_EXPORT_INTERVAL": "1000",
                  "OTEL_TRACES_EXPORTER": "otlp"}
    workloads = [Produce(1024, acks, 1, "none", args.records, tool) for tool in ("librdkafka", "java") for acks in ("1", "all")]
    # lz4 batches without trace context (the broker decompresses each batch's first record only)
    # and with an unsampled context in every record (each batch's first 64 KiB are read, and
    # nothing is recorded).
    workloads.append(Produce(1024, "1", 1, "lz4", args.records, "librdkafka"))
    workloads.append(Produce(1024, "1", 1, "lz4", args.records, "librdkafka", header=f"traceparent={UNSAMPLED}"))
    res = Results()
    with tempfile.TemporaryDirectory(prefix="oxbow-telemetry-") as tmp:
        for r in range(args.rounds):
            for cls in MODES[r % len(MODES):] + MODES[:r % len(MODES)]:
                d = Path(tmp) / f"round{r}-{cls.name.replace(' ', '-')}"
                d.mkdir()
                b = cls(d, cp)
                try:
                    b.start()
                    for i, w in enumerate(workloads):
                        log(f"round {r + 1}/{args.rounds}, {b.name}: {w.name}")
                        run_produce(b, cp, w, f"overhead-{i}", res)
                finally:
                    b.stop()
                    b.kill()
                    shutil.rmtree(d, ignore_errors=True)  # a run writes 4 x records x 1 KiB
    # Only the exporting brokers know the receiver.
    points = list(sink.points)
    produced = [v for name, _, v in points if name == "oxbow.broker.produced.records"]
    with sink.lock:
        spans = [s for s in sink.spans if s["service"] == "oxbow-broker"]
    produce_spans = sum(1 for s in spans if s["name"] == "Produce")
    rows = []
    for (workload, metric, unit, better), per in res.values.items():
        med = {m.name: statistics.median(per[m.name]) for m in MODES}
        off = med[Quiet.name]
        rows.append({"workload": workload, "metric": metric, "unit": unit,
                     **{m.name: round(med[m.name], 3) for m in MODES},
                     **{f"{m.name} / off": round(med[m.name] / off, 4) if off else None for m in (Metrics, Traces)},
                     "runs": {m.name: per[m.name] for m in MODES}})
    meta = {"command": " ".join(["tests/bench/telemetry-overhead", *sys.argv[1:]]),
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "duration_s": round(time.monotonic() - t0),
            "machine": bench.machine(), "rounds": args.rounds, "records": args.records,
            "points received": len(points), "largest oxbow.broker.produced.records received": max(produced, default=0),
            "spans received": len(spans), "Produce spans received": produce_spans}
    lines = ["# Telemetry export overhead: produce with OTLP export off, metrics, metrics + traces", "",
             f"Generated by `{meta['command']}` on {meta['date']} in {meta['duration_s']} s; {args.rounds} rounds, "
             f"rotating the order, medians. Metrics every 1 s and traces at the default sampling (1% of requests) "
             f"to an OTLP/HTTP receiver on loopback; it received {len(points)} points, the largest "
             f"`oxbow.broker.produced.records` {meta['largest oxbow.broker.produced.records received']:,.0f}, and "
             f"{len(spans):,} spans ({produce_spans:,} of them Produce).", "",
             "| workload | metric | unit | export off | metrics | metrics + traces | metrics / off | metrics + traces / off |",
             "|---|---|---|---:|---:|---:|---:|---:|"]
    lines += [f"| {r['workload']} | {r['metric']} | {r['unit']} | {r['export off']:,} | {r['metrics']:,} | "
              f"{r['metrics + traces']:,} | {r['metrics / off']:.3f} | {r['metrics + traces / off']:.3f} |"
              for r in rows]
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(lines) + "\n")
    out.with_suffix(".json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=2, ensure_ascii=False) + "\n")
    print("\n".join(lines))
    if not produced or max(produced) < args.records:
        print("the broker's metrics did not arrive: the exporting runs measured nothing")
        return 1
    if not produce_spans:
        print("no Produce span arrived: the traced runs traced nothing")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
