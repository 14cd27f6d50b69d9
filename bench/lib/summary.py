#!/usr/bin/env python3
# bench/run.sh's summary: the table of medians, the warm-up status mix, the RATIOS pairs,
# the limit overhead and the Redis store section, from the raw per-run rows.
# usage: summary.py RUNS_TSV RATIOS "CONTENDER ..." "NAME=EXPECT ..." STATUS_FILE CLK_TCK
import os, sys, statistics
tsv, ratios, order = sys.argv[1], sys.argv[2].split(), sys.argv[3].split()
clk = int(sys.argv[6])
expect = {n: set(e.split(",")) for n, _, e in (x.partition("=") for x in sys.argv[4].split())}
status_file = sys.argv[5]
rows = {}
for line in open(tsv):
    if line.startswith("#"): continue
    f = line.rstrip("\n").split("\t") + ["-"] * 10
    rnd, name, rps, p50, p99, req, non, sock, ticks, cpu = f[:10]
    num = lambda x: None if x in ("-", "") else int(x)
    rticks, rcmds, scmds, swrites, serrs = map(num, f[10:15])
    rows.setdefault(name, []).append(dict(rps=float(rps), p50=float(p50), p99=float(p99),
        req=int(req), non=int(non), sock=int(sock), cpu=float(cpu),
        rcpu=None if rticks is None else rticks / clk * 1e6 / int(req),
        rcmd=None if rcmds is None else rcmds / int(req),
        pipe=None if not swrites else scmds / swrites, scmds=scmds, swrites=swrites, serrs=serrs,
        **{k: None if v in ("-", "") else float(v) for k, v in
           zip(("tnew", "tnewcpu", "treuse", "treusecpu", "tresumed"), f[15:20])}))
mix = {}  # warm-up status counts: name -> {code: count}
if status_file and os.path.exists(status_file):
    for line in open(status_file):
        name, code, count = line.split()
        mix.setdefault(name, {})[code] = int(count)
med = {n: {k: statistics.median(r[k] for r in rs) for k in ("rps", "p50", "p99", "cpu")}
       for n, rs in rows.items()}
W = max([len(n) for n in order] + [5])
hdr = (f"{'proxy':<{W}} | {'req/s':>9} | {'p50 ms':>7} | {'p99 ms':>7} | {'CPU us/req':>10} | {'429 %':>7}"
       " | errors (unexpected non2xx/socket, all rounds)")
print(hdr); print("-" * len(hdr))
for n in order:
    if n not in rows: continue
    m = med[n]; req = sum(r["req"] for r in rows[n])
    non = sum(r["non"] for r in rows[n]); sock = sum(r["sock"] for r in rows[n])
    if "429" in expect.get(n, {"200"}):
        # wrk counts non-2xx only; the warm-up's status mix (below) shows they are 429s
        pct = f"{100 * non / req:.2f}"; bad = 0
    else:
        pct = "0.00" if non == 0 else f"<={100 * non / req:.2f}"; bad = non
    print(f"{n:<{W}} | {m['rps']:>9.0f} | {m['p50']:>7.3f} | {m['p99']:>7.3f} | {m['cpu']:>10.2f} | {pct:>7} | {bad}/{sock}")
print()
if mix:
    print("status mix in the warm-up runs (wrk Lua counter; the measured runs count non-2xx only,")
    print("which for a 429-expecting contender are reported as its 429 %):")
    for n in order:
        if n not in mix: continue
        tot = sum(mix[n].values()) or 1
        parts = "  ".join(f"{c}: {k} ({100 * k / tot:.2f}%)" for c, k in sorted(mix[n].items()))
        odd = sorted(set(mix[n]) - expect.get(n, {"200"}))
        print(f"  {n:<{W}}  {parts}" + (f"  UNEXPECTED: {' '.join(odd)}" if odd else ""))
else:
    print("status mix: not sampled (WARMUP=0); a 429-expecting contender's non-2xx are reported as 429 %")
printed = False
div = lambda x, y: f"{x / y:.2f}" if y else "n/a"
for pair in ratios:
    a, _, b = pair.partition(":")
    if a not in med or b not in med: continue
    if not printed:
        print(); print("ratios (medians; req/s higher is better, p99 and CPU lower is better):"); printed = True
    A, B = med[a], med[b]
    print(f"  {a}/{b}: req/s {div(A['rps'], B['rps'])}  p99 {div(A['p99'], B['p99'])}  CPU/req {div(A['cpu'], B['cpu'])}")
if not printed:
    print(); print(f"ratios: none ({' '.join(ratios) or 'RATIOS empty'}: not both measured)")
over = [(a, b) for a, _, b in (p.partition(":") for p in ratios) if a == b + "-limit-pass" and a in med and b in med]
if over:
    print(); print("limit overhead (X-limit-pass vs X, the same proxy with a never-rejecting limit checked on every request;")
    print("change of the medians, negative req/s = slower):")
    for a, b in over:
        A, B = med[a], med[b]
        thr = 100 * (1 - A["rps"] / B["rps"]) if B["rps"] else float("nan")
        cpu = 100 * (A["cpu"] / B["cpu"] - 1) if B["cpu"] else float("nan")
        goal = ""
        if b == "sluice":
            goal = "  goal < 5%: " + ("met" if thr < 5 and cpu < 5 else "NOT met")
        print(f"  {b}: req/s {-thr:+.1f}%  CPU us/req {cpu:+.1f}%  (throughput lost {thr:.1f}%, CPU added {cpu:.1f}%){goal}")
redis = [n for n in order if n in rows and any(r["rcpu"] is not None for r in rows[n])]
if redis:
    mm = lambda rs, k: statistics.median(r[k] for r in rs if r[k] is not None) if any(r[k] is not None for r in rs) else None
    print(); print("Redis store (medians over rounds; redis-server's CPU is NOT in the CPU us/req column above;")
    print("Redis cmds/req = INFO total_commands_processed, commands run inside scripts included;")
    print("commands/write = Sluice's sluice_redis_commands_total / sluice_redis_writes_total over the run,")
    print("i.e. the pipelining factor):")
    hdr = (f"  {'proxy':<{W}} | {'req/s':>9} | {'p99 ms':>7} | {'proxy CPU':>9} | {'redis CPU':>9} | {'sum CPU':>9}"
           f" | {'Redis cmds/req':>14} | {'commands/write':>14} | errors")
    print(hdr); print("  " + "-" * (len(hdr) - 2))
    for n in redis:
        rs = rows[n]; rc = mm(rs, "rcpu"); pc = med[n]["cpu"]
        sumc = statistics.median(r["cpu"] + r["rcpu"] for r in rs if r["rcpu"] is not None)
        pipe = mm(rs, "pipe"); rcmd = mm(rs, "rcmd")
        errs = sum(r["serrs"] for r in rs if r["serrs"] is not None) if any(r["serrs"] is not None for r in rs) else None
        per_round = "  (rounds: " + " ".join(f"{r['pipe']:.1f}" for r in rs if r["pipe"] is not None) + ")" if pipe is not None else ""
        print(f"  {n:<{W}} | {med[n]['rps']:>9.0f} | {med[n]['p99']:>7.3f} | {pc:>9.2f} | {rc:>9.2f} | {sumc:>9.2f}"
              f" | {rcmd:>14.2f} | {('-' if pipe is None else f'{pipe:.1f}'):>14} | {'-' if errs is None else errs}{per_round}")
    print("  (CPU columns in us/req: proxy = the contender's process, redis = redis-server, sum = both, per run then median;")
    print("   errors = Sluice's sluice_redis_errors_total + sluice_redis_timeouts_total over all rounds, each would have")
    print("   been forwarded unchecked by on_error: allow)")
    if "sluice-redis" in med and "sluice-limit-pass" in med:
        A, B = med["sluice-redis"], med["sluice-limit-pass"]
        thr = 100 * (1 - A["rps"] / B["rps"]) if B["rps"] else float("nan")
        cpu = 100 * (A["cpu"] / B["cpu"] - 1) if B["cpu"] else float("nan")
        rsum = statistics.median(r["cpu"] + r["rcpu"] for r in rows["sluice-redis"] if r["rcpu"] is not None)
        print(); print("Redis store overhead (sluice-redis vs sluice-limit-pass: the same policy, Redis store vs memory store):")
        print(f"  req/s {-thr:+.1f}%  Sluice CPU us/req {cpu:+.1f}%  Sluice + redis-server CPU us/req "
              f"{100 * (rsum / B['cpu'] - 1):+.1f}%  (throughput lost {thr:.1f}%)  goal < 15%: {'met' if thr < 15 else 'NOT met'}")

tls = [n for n in order if n in rows and any(r["tnew"] is not None for r in rows[n])]
if tls:
    md = lambda n, k: statistics.median(r[k] for r in rows[n] if r[k] is not None)
    print(); print("TLS (medians over rounds): keep-alive HTTPS req/s and CPU from the table above; new connections")
    print("per second from openssl s_time (each connection a handshake + one HTTP/1.0 GET; full = -new,")
    print("resumed = -reuse, a session ticket from the client's first connection), CPU = the contender's per connection:")
    hdr = (f"  {'proxy':<{W}} | {'req/s':>9} | {'CPU us/req':>10} | {'full conns/s':>12} | {'CPU us':>7}"
           f" | {'resumed conns/s':>15} | {'CPU us':>7} | resumed %")
    print(hdr); print("  " + "-" * (len(hdr) - 2))
    for n in tls:
        print(f"  {n:<{W}} | {med[n]['rps']:>9.0f} | {med[n]['cpu']:>10.2f} | {md(n, 'tnew'):>12.0f} | {md(n, 'tnewcpu'):>7.1f}"
              f" | {md(n, 'treuse'):>15.0f} | {md(n, 'treusecpu'):>7.1f} | {md(n, 'tresumed'):.1f}")
    base = tls[0]
    for n in tls[1:]:
        print(f"  {base}/{n}: keep-alive req/s {div(med[base]['rps'], med[n]['rps'])}"
              f"  full conns/s {div(md(base, 'tnew'), md(n, 'tnew'))}  resumed conns/s {div(md(base, 'treuse'), md(n, 'treuse'))}")
