#!/usr/bin/env python3
"""The service benchmark: `glint serve` (the Tinker API) under N concurrent clients,
against `glint train` doing the same tenants' work in one process.

Usage: run.py GLINT_BINARY [--clients N] [--steps S] [--batch B] [--seq-len L]
              [--rank R] [--lines K] [--cycle-window-ms MS]
              [--repeat K] [--skip-train] [--work DIR]

1. Builds the model once (glint init-model --seed 0 from model.json beside this file:
   Qwen3-MoE, hidden 256, 4 layers, 8 experts of width 256, top-2, vocab 1024; 7.6 M
   parameters) under WORK/model, and N pre-tokenized data files of K lines (default
   K = B: every step trains the whole file) of L random ids (fixed seeds).
2. Starts ONE `glint serve --dtype float32` on a free loopback port, then N client
   processes at once (client.py), each running the SDK's SFT loop for S steps on its
   own LoRA model (rank R): per step one forward_backward of B datums and one
   optim_step, submitted together, then both waited. Stops the server (SIGTERM).
3. Runs the same N tenants with `glint train --tenant ...` (same data, rank, float32,
   constant lr, the same AdamW settings), the reference.
4. Prints one JSON object: the service's requests/s (forward_backward + optim_step),
   forward_backward round trips (submit to result, p50/p99), tokens/s in all and per
   tenant, loop and wall times; glint train's tokens/s, wall and step times; and their
   ratios (docs/BENCHMARKS.md, "bench/service", says what each field means). With
   --repeat K, steps 2 and 3 alternate K times and each side's fastest repetition is
   reported (the machine's noise only ever slows a run down), with every repetition's
   throughput under "repetitions".

Tokens are non-padding input tokens: a service datum's input is ids[:-1] (L-1 tokens),
glint train's row is the whole line (L tokens; its last position has no label).
With K = B both sides train the same sequences in every step, so each step's loss
through the service must match glint train's for that tenant (loss_max_rel_diff: a
check that the service did the same work, float32 rounding apart).

Any failure (a client's, the server's, glint train's) ends the run with exit status 1
and the reason on stderr; the server and the clients are always stopped at the end,
also on Ctrl-C or SIGTERM."""
import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


class BenchError(Exception):
    pass


CHILDREN = []  # every process started here, ended in cleanup()


def start(cmd, log_path, **kw):
    log = open(log_path, "w")
    p = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, **kw)
    log.close()
    CHILDREN.append(p)
    return p


def cleanup():
    for p in CHILDREN:
        if p.poll() is None:
            p.terminate()
    deadline = time.monotonic() + 30
    for p in CHILDREN:
        if p.poll() is None:
            try:
                p.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def tail(path, n=3000):
    try:
        with open(path, errors="replace") as f:
            return f.read()[-n:]
    except OSError:
        return ""


def percentile(xs, q):
    """Linear interpolation between closest ranks (numpy's default)."""
    xs = sorted(xs)
    if not xs:
        return None
    pos = (len(xs) - 1) * q
    lo = int(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def result_groups(results, gap=0.005):
    """Cycles as the clients saw them: results that arrived within `gap` seconds of each
    other (a cycle finishes all of its requests at once) form a group. Returns the number
    of groups holding forward_backward results, the mean forward_backward results in
    them, and the fraction of steps whose optim_step result came in its forward_backward
    result's group (both ran in one cycle). An inference from the clients' clocks: a reply
    delayed in the network stack can split a group."""
    events = []
    for i, r in enumerate(results):
        for k, s in enumerate(r["steps"]):
            events.append((s["start"] + s["forward_backward_s"], "fb", i, k))
            events.append((s["end"], "optim", i, k))
    events.sort()
    groups = []
    for e in events:
        if groups and e[0] - groups[-1][-1][0] < gap:
            groups[-1].append(e)
        else:
            groups.append([e])
    fb_groups = [g for g in groups if any(x[1] == "fb" for x in g)]
    together = 0
    for g in groups:
        fbs = {(x[2], x[3]) for x in g if x[1] == "fb"}
        together += sum(1 for x in g if x[1] == "optim" and (x[2], x[3]) in fbs)
    n_fb = sum(1 for e in events if e[1] == "fb")
    return {"forward_backward_groups": len(fb_groups),
            "forward_backward_per_group": round(n_fb / max(1, len(fb_groups)), 2),
            "optim_with_its_forward_backward": round(together / max(1, n_fb), 3)}


def peak_rss_mb(pid):
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return round(int(line.split()[1]) / 1024)
    except OSError:
        pass
    return None


def build_model(glint, work):
    model = os.path.join(work, "model")
    config = os.path.join(HERE, "model.json")
    stamp = os.path.join(model, "bench-config.json")
    want = open(config).read()
    if os.path.exists(os.path.join(model, "model.safetensors")) and os.path.exists(stamp) and open(stamp).read() == want:
        return model
    shutil.rmtree(model, ignore_errors=True)
    p = subprocess.run([glint, "init-model", "--config", config, "--output", model, "--seed", "0"],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if p.returncode != 0:
        raise BenchError("glint init-model failed:\n" + p.stdout[-3000:])
    with open(stamp, "w") as f:
        f.write(want)
    return model


def make_data(work, n, lines, seq_len, vocab):
    paths = []
    os.makedirs(os.path.join(work, "data"), exist_ok=True)
    for i in range(n):
        rng = random.Random(1000 + i)
        path = os.path.join(work, "data", "t%d.jsonl" % i)
        with open(path, "w") as f:
            for _ in range(lines):
                f.write(json.dumps({"input_ids": [rng.randrange(vocab) for _ in range(seq_len)]}) + "\n")
        paths.append(path)
    return paths


def run_service(a, model, data, work):
    state = os.path.join(work, "state")
    shutil.rmtree(state, ignore_errors=True)
    port_file = os.path.join(work, "port")
    if os.path.exists(port_file):
        os.remove(port_file)
    log = os.path.join(work, "serve.log")
    cmd = [a.glint, "serve", "--model", model, "--state-dir", state, "--insecure-no-auth", "--port", "0",
           "--port-file", port_file, "--dtype", "float32", "--max-tenants", str(max(8, a.clients)),
           "--max-rank", str(max(32, a.rank))]
    if a.cycle_window_ms is not None:
        cmd += ["--cycle-window-ms", str(a.cycle_window_ms)]
    env = None
    t0 = time.monotonic()
    server = start(cmd, log, env=env)
    while not os.path.exists(port_file):
        if server.poll() is not None:
            raise BenchError("glint serve exited with status %d before listening:\n%s" % (server.returncode, tail(log)))
        if time.monotonic() - t0 > 120:
            raise BenchError("glint serve did not listen within 120 s:\n" + tail(log))
        time.sleep(0.02)
    port = int(open(port_file).read())
    server_start_s = time.monotonic() - t0

    clients = []
    t_launch = time.monotonic()
    for i, path in enumerate(data):
        out = os.path.join(work, "client%d.json" % i)
        if os.path.exists(out):
            os.remove(out)
        cmd = [sys.executable, os.path.join(HERE, "client.py"), "--port", str(port), "--data", path,
               "--steps", str(a.steps), "--batch", str(a.batch), "--rank", str(a.rank), "--seed", str(i),
               "--lr", str(a.lr), "--timeout", str(a.timeout), "--out", out]
        clients.append((start(cmd, os.path.join(work, "client%d.log" % i)), out, os.path.join(work, "client%d.log" % i)))
    # Wait for every client; the first failure (a client's or the server's) ends the run.
    while True:
        running = 0
        for i, (p, out, clog) in enumerate(clients):
            rc = p.poll()
            if rc is None:
                running += 1
            elif rc != 0:
                raise BenchError("client %d exited with status %d: %s\nserver log:\n%s"
                                 % (i, rc, tail(clog).strip(), tail(log, 1500)))
        if server.poll() is not None:
            raise BenchError("glint serve exited with status %d while clients ran:\n%s" % (server.returncode, tail(log)))
        if not running:
            break
        if time.monotonic() - t_launch > a.timeout + 30:
            raise BenchError("the clients did not finish within %g s" % (a.timeout + 30))
        time.sleep(0.05)
    clients_wall = time.monotonic() - t_launch
    wall = time.monotonic() - t0  # from starting glint serve: the model's loading included, as in glint train's wall
    rss = peak_rss_mb(server.pid)
    server.send_signal(signal.SIGTERM)
    try:
        code = server.wait(60)
    except subprocess.TimeoutExpired:
        server.kill()
        raise BenchError("glint serve did not stop within 60 s of SIGTERM:\n" + tail(log))
    if code != 0:
        raise BenchError("glint serve exited with status %d after SIGTERM:\n%s" % (code, tail(log)))

    results = [json.load(open(out)) for _, out, _ in clients]
    steps = [s for r in results for s in r["steps"]]
    loop_start = min(r["steps"][0]["start"] for r in results)
    loop_end = max(r["steps"][-1]["end"] for r in results)
    loop = loop_end - loop_start
    tokens = sum(s["input_tokens"] for s in steps)
    fb = [s["forward_backward_s"] for s in steps]
    per_tenant = []
    for r in results:
        t = r["steps"][-1]["end"] - r["steps"][0]["start"]
        per_tenant.append(round(sum(s["input_tokens"] for s in r["steps"]) / t, 1))
    service = {
        "requests_per_s": round(2 * len(steps) / loop, 2),  # forward_backward + optim_step
        "http_requests_per_s": round(sum(r["http_requests"] for r in results) / clients_wall, 2),
        "forward_backward_p50_s": round(percentile(fb, 0.5), 4),
        "forward_backward_p99_s": round(percentile(fb, 0.99), 4),
        "step_p50_s": round(percentile([s["step_s"] for s in steps], 0.5), 4),
        # the forward_backward POST alone (answered with a future at once), and how long
        # the optim_step's result came after the forward_backward's
        "submit_p50_s": round(percentile([s["submit_s"] for s in steps], 0.5), 4),
        "optim_after_forward_backward_p50_s": round(percentile([s["step_s"] - s["forward_backward_s"] for s in steps], 0.5), 4),
        "tokens": tokens,
        "tokens_per_s_total": round(tokens / loop, 1),
        "tokens_per_s_per_tenant": per_tenant,
        "loop_s": round(loop, 3),
        "wall_s": round(wall, 3),
        "clients_wall_s": round(clients_wall, 3),
        "client_setup_s_max": round(max(r["setup_s"] for r in results), 3),
        "server_start_s": round(server_start_s, 3),
        "server_peak_rss_mb": rss,
        "try_again": sum(r["try_again"] for r in results),
        "result_groups": result_groups(results),
        "too_many_requests": sum(r["too_many_requests"] for r in results),
    }
    losses = [[s["loss"] for s in r["steps"]] for r in results]
    return service, losses


def run_train(a, model, data, work):
    out = os.path.join(work, "train")
    shutil.rmtree(out, ignore_errors=True)
    cmd = [a.glint, "train", "--model", model, "--output", out, "--steps", str(a.steps), "--batch-size", str(a.batch),
           "--dtype", "float32", "--eval-every", "0", "--warmup-steps", "0", "--min-lr-ratio", "1",
           "--lr", str(a.lr), "--max-grad-norm", "1", "--adam-beta2", "0.999", "--adam-eps", "1e-8",
           "--router-aux-loss-coef", "0", "--log-every", "1000"]
    for i, path in enumerate(data):
        cmd += ["--tenant", "name=t%d,r=%d,data=%s,steps=%d,batch=%d,warmup=0,seed=%d"
                % (i, a.rank, path, a.steps, a.batch, i)]
    log = os.path.join(work, "train.log")
    t0 = time.monotonic()
    p = start(cmd, log)
    try:
        code = p.wait(a.timeout)
    except subprocess.TimeoutExpired:
        raise BenchError("glint train did not finish within %g s:\n%s" % (a.timeout, tail(log)))
    wall = time.monotonic() - t0
    if code != 0:
        raise BenchError("glint train exited with status %d:\n%s" % (code, tail(log)))
    steps = [json.loads(l) for l in open(os.path.join(out, "metrics.jsonl"))]
    if len(steps) != a.steps:
        raise BenchError("glint train wrote %d steps of metrics, not %d" % (len(steps), a.steps))
    secs = [s["tokens"] / s["tokens_per_s"] for s in steps]
    tokens = sum(s["tokens"] for s in steps)
    train = {
        "tokens": tokens,
        "tokens_per_s_total": round(tokens / sum(secs), 1),
        "wall_s": round(wall, 3),
        "loop_s": round(steps[-1]["elapsed_s"], 3),
        "step_s_mean": round(sum(secs) / len(secs), 4),
        "step_s_p50": round(percentile(secs, 0.5), 4),
        "peak_rss_mb": round(max(s["peak_rss_mb"] for s in steps)),
    }
    losses = []
    for i in range(len(data)):
        losses.append([json.loads(l)["loss"] for l in open(os.path.join(out, "t%d" % i, "metrics.jsonl"))])
    return train, losses


def on_sigterm(signum, frame):
    raise KeyboardInterrupt


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("glint")
    ap.add_argument("--clients", type=int, default=2)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq-len", type=int, default=128)
    ap.add_argument("--rank", type=int, default=8)
    ap.add_argument("--lines", type=int, default=0, help="lines per data file (0: --batch)")
    ap.add_argument("--lr", type=float, default=2e-4)
    ap.add_argument("--cycle-window-ms", type=float, default=None, help="passed to glint serve (default: its own)")
    ap.add_argument("--timeout", type=float, default=600, help="seconds for the clients, and for glint train")
    ap.add_argument("--repeat", type=int, default=1,
                    help="alternate service and glint train this many times; report each side's fastest")
    ap.add_argument("--skip-train", action="store_true", help="the service part only")
    ap.add_argument("--work", default="/tmp/glint-bench-service")
    a = ap.parse_args()
    if a.clients < 1 or a.steps < 1 or a.batch < 1 or a.seq_len < 2 or a.rank < 1 or a.repeat < 1:
        ap.error("--clients, --steps, --batch, --rank, --repeat must be positive and --seq-len at least 2")
    a.glint = os.path.abspath(a.glint)
    lines = a.lines or a.batch
    os.makedirs(a.work, exist_ok=True)
    # SIGTERM ends the run as Ctrl-C does: through the finally below.
    signal.signal(signal.SIGTERM, on_sigterm)
    try:
        model = build_model(a.glint, a.work)
        vocab = json.load(open(os.path.join(model, "config.json")))["vocab_size"]
        data = make_data(a.work, a.clients, lines, a.seq_len, vocab)
        rec = {"clients": a.clients, "steps": a.steps, "batch": a.batch, "seq_len": a.seq_len, "rank": a.rank,
               "lines": lines, "cycle_window_ms": a.cycle_window_ms,
               "repeat": a.repeat}
        # Service and glint train alternate; each side's fastest repetition is reported (the
        # machine's noise only slows a run down).
        services, trains, rel = [], [], 0.0
        for _ in range(a.repeat):
            service, service_losses = run_service(a, model, data, a.work)
            services.append(service)
            if a.skip_train:
                continue
            train, train_losses = run_train(a, model, data, a.work)
            trains.append(train)
            if lines == a.batch:  # the same sequences every step on both sides
                for s, t in zip(service_losses, train_losses):
                    for x, y in zip(s, t):
                        rel = max(rel, abs(x - y) / max(abs(y), 1e-30))
        service = min(services, key=lambda s: s["loop_s"])
        rec["service"] = service
        if trains:
            train = min(trains, key=lambda t: t["loop_s"])
            rec["train"] = train
            rec["overhead_ratio"] = {
                "wall": round(service["wall_s"] / train["wall_s"], 3),
                "loop": round(service["loop_s"] / train["loop_s"], 3),
                "tokens_per_s_service_over_train": round(service["tokens_per_s_total"] / train["tokens_per_s_total"], 3),
            }
            if lines == a.batch:
                rec["loss_max_rel_diff"] = float("%.3g" % rel)
        if a.repeat > 1:
            rec["repetitions"] = [
                {"service_tokens_per_s": s["tokens_per_s_total"], "service_loop_s": s["loop_s"],
                 "forward_backward_p50_s": s["forward_backward_p50_s"],
                 **({"train_tokens_per_s": t["tokens_per_s_total"], "train_loop_s": t["loop_s"]} if t else {})}
                for s, t in zip(services, trains or [None] * len(services))]
    except BenchError as e:
        print("bench/service: " + str(e), file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("bench/service: interrupted", file=sys.stderr)
        return 130
    finally:
        cleanup()
    print(json.dumps(rec), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
