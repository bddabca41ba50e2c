#!/usr/bin/env python3
"""The soak benchmark: `glint serve` (the Tinker API) under C concurrent clients for D
seconds of a random mix of requests, SIGKILLed and restarted on its state directory
twice meanwhile, then checked; and with --sampling, the service's sampling throughput
against `glint generate` of the same prompts with the same adapter.

Usage: soak.py GLINT_BINARY [--clients C] [--duration D] [--kills K] [--max-tenants N]
               [--warmup W] [--seed S] [--work DIR]
       soak.py GLINT_BINARY --sampling [--prompts P] [--num-samples N] [--new-tokens T]
               [--prompt-len L] [--repeat K] [--variants V,...] [--work DIR]

The soak (default):
1. Builds the model once (glint init-model --seed 0 from model.json beside this file:
   Qwen3-MoE, hidden 256, 4 layers, 8 experts, vocab 1024; 7.6 M parameters) under
   WORK/model, and starts `glint serve --dtype float32 --insecure-no-auth --max-tenants N
   --state-dir WORK/state` on a free loopback port.
2. Runs C client threads (default 16) for D seconds (default 600). Each opens a session
   and loops over a random mix, seeded per client, of forward_backward (cross_entropy,
   1-4 datums of 8-32 random ids), optim_step, named save_weights and
   save_weights_for_sampler, load_weights of one of its own acknowledged weights/
   checkpoints of the model's rank, asample from one of its own sampler checkpoints
   (num_samples 1-4, max_tokens 8-16) and create_model (rank 4, 8 or 16: the clients
   hold far more models than the N slots, so models page out and in all the time). An
   operation works on the client's newest model, or now and then on one of its three
   before. Model requests carry seq_id per model (1, 2, ... as the SDK numbers them);
   every future is polled with retrieve_future until it is not try_again; sessions send
   a heartbeat every 10 s. One request in flight per client.
3. At D/(K+1), 2D/(K+1), ... (K = 2 by default) the server is SIGKILLed, the models'
   state.json files are read (what the next process will find), and the server is
   started again on the same port and state directory. While it is down the clients
   get connection errors and retry the same request (same seq_id and
   X-Idempotency-Key) with backoff: not failures. After a restart:
   - a future submitted before the kill is gone (retrieve_future 404): counted as lost;
   - a session is gone (404 "no session"): the client opens a new one;
   - a model whose state.json said "paged" or "fresh" continues, and the first answer
     to its next request must carry a "message";
   - a model that was in memory and changed since its last page-out answers 410, by
     design: counted as "models lost to a SIGKILL"; the client continues from the
     model's newest acknowledged weights/ checkpoint (create_model of the same rank,
     then load_weights with the optimizer state), or makes a fresh model if it had none.
4. After D seconds the clients finish their current request. Then every weights/
   checkpoint the server acknowledged (a 200 result with its path) is loaded into a
   fresh model of its rank (create_model, load_weights with the optimizer, unload_model)
   and every sampler_weights/ checkpoint is sampled from once; all must succeed. Then
   the server is stopped with SIGTERM, which must end it with status 0.
5. Prints one JSON object: per kind of request its count, p50/p99 latency (first submit
   to result; requests that lived through a kill are counted but not timed) and errors
   by status; HTTP answers by route and status (the clients' and the server's access
   log); the kills; the expected events; each client's successful operations (how
   fairly the slots were shared); the server's RSS; the checks and every failure.

Checks (any failure: exit status 1, and each failure is printed under "failures"):
no 5xx; no 4xx the client did not cause (every 4xx is classified: a 410 for a model
the kill found changed since its last page-out, a 404 for a session or future of an
earlier process, 429 and 409 "still being handled" are expected, anything else is a
failure); no future with an error; results of the right shape (a datum's logprobs per
target, num_samples sequences of max_tokens tokens); a 410 exactly for the models the
kill lost; a "message" on the first answer of each model revived from disk; no
connection error while the server was up; every acknowledged checkpoint loadable at the
end; the server's RSS (VmRSS of /proc/PID/status, sampled every second) at the end of
the run within 10% of its RSS after the warm-up (W seconds after the last restart,
default 60, at most half of what is left of the run: RSS starts over with each process).

--sampling: sampling throughput through the service against `glint generate`. A server
trains a rank-8 model for a few steps and saves it with save_weights_for_sampler: a PEFT
adapter directory, which `glint generate --adapter` loads. P prompts (default 8) of L
random ids (default 16) are sampled N times each (default 16) for T new tokens (default
64; temperature 1, no stop token, so every sample has T tokens): through the service, P
asample requests (num_samples N, seed S_p) sent at once by P threads; with `glint
generate`, which takes one prompt and makes one sample, P x N processes one after
another (--seed S_p + i, the seed the service gives sample i: both must produce the
same tokens). Each repetition (--repeat, default 3) runs every service variant in turn
(its own server on the same state directory, warmed by one 1-token asample that loads
the adapter), then glint generate; each side's best repetition is reported (the machine
is shared and noisy, and noise only slows a run down). Variants (--variants, the first
is the one checked): default (glint serve as it is), threads-1 (--threads 1: no OpenMP
regions), omp-passive (OMP_WAIT_POLICY=passive: idle OpenMP threads sleep instead of
spinning), window-0 (--cycle-window-ms 0). Tokens/s: the service's tokens over the time
from the first submit to the last result; glint generate's over the sum of its
processes' wall times (model load included: "wall"), and over its decoding alone (each
process's first printed token to its last, the tokens after the first: "decode"). Also
timed: single asample requests (num_samples 1) of T/4, T/2 and T new tokens against
glint generate of the same, best of two. The check: the first variant reaches 0.9 of
glint generate's decode tokens/s, and every sample equals glint generate's.

Work files (server logs, state) stay under WORK (default /tmp/glint-bench-soak); the
server is always stopped at the end, also on Ctrl-C or SIGTERM."""
import argparse
import http.client
import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import traceback
from collections import Counter, defaultdict

# The model, errors and statistics as the throughput benchmark beside this file has them.
from run import BenchError, build_model, on_sigterm, percentile, tail

HERE = os.path.dirname(os.path.abspath(__file__))
HOST = "127.0.0.1"
HTTP_TIMEOUT = 120  # seconds a request may take (retrieve_future holds a poll up to 20 s)
ADAM = {"learning_rate": 1e-4, "beta1": 0.9, "beta2": 0.95, "eps": 1e-12, "weight_decay": 0.0,
        "grad_clip_norm": 1.0}
# The mix: kind of operation, relative weight.
MIX = [("forward_backward", 30), ("optim_step", 18), ("save_weights", 8), ("save_weights_for_sampler", 8),
       ("load_weights", 8), ("asample", 18), ("create_model", 5)]
RANKS = (4, 8, 16)


def rss_kb(pid):
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


SERVERS = []  # every Server made here, stopped in main()'s finally


class Server:
    """One `glint serve` at a time on a fixed state directory: started (the first time
    on a free port, later on the same one), SIGKILLed, started again, stopped."""

    def __init__(self, glint, model, work, max_tenants, extra=(), env=None, log_prefix="serve"):
        self.glint, self.model, self.work = glint, model, work
        self.state = os.path.join(work, "state")
        self.max_tenants = max_tenants
        self.extra = list(extra)
        self.env = dict(os.environ, **env) if env else None
        self.log_prefix = log_prefix
        self.port = 0
        self.proc = None
        self.logs = []
        SERVERS.append(self)

    def start(self):
        port_file = os.path.join(self.work, "port")
        if os.path.exists(port_file):
            os.remove(port_file)
        log = os.path.join(self.work, "%s-%d.log" % (self.log_prefix, len(self.logs)))
        self.logs.append(log)
        cmd = [self.glint, "serve", "--model", self.model, "--state-dir", self.state, "--insecure-no-auth",
               "--dtype", "float32", "--max-tenants", str(self.max_tenants), "--port", str(self.port),
               "--port-file", port_file] + self.extra
        t0 = time.monotonic()
        with open(log, "w") as f:
            self.proc = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         env=self.env)
        while not os.path.exists(port_file):
            if self.proc.poll() is not None:
                raise BenchError("glint serve exited with status %d before listening:\n%s"
                                 % (self.proc.returncode, tail(log)))
            if time.monotonic() - t0 > 120:
                raise BenchError("glint serve did not listen within 120 s:\n" + tail(log))
            time.sleep(0.02)
        self.port = int(open(port_file).read())
        return time.monotonic() - t0

    def kill(self):
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def terminate(self, timeout=60):
        """SIGTERM; (exit status, seconds) or (None, timeout) when it did not stop."""
        t0 = time.monotonic()
        self.proc.send_signal(signal.SIGTERM)
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            return None, timeout
        return code, time.monotonic() - t0

    def cleanup(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


class Down(Exception):
    """A connection error: the server is (or was) not there."""


class Hang(Exception):
    """No answer within HTTP_TIMEOUT seconds."""


class Conn:
    """One keep-alive HTTP connection, opened again after an error or a restart."""

    def __init__(self, bench):
        self.bench = bench
        self.c = None
        self.epoch = -1  # the server process it was opened to

    def close(self):
        if self.c is not None:
            self.c.close()
        self.c = None

    def request(self, method, route, body=None, headers=None):
        """(status, parsed body or None, Retry-After header, epoch); raises Down or Hang.
        A kept-alive connection the server closed meanwhile (it closes idle ones after a
        few seconds) is opened again once, as HTTP clients do; a fresh connection that
        fails raises Down."""
        epoch = self.bench.epoch
        h = {"Content-Type": "application/json"}
        h.update(headers or {})
        for attempt in (0, 1):
            fresh = self.c is None or self.epoch != epoch
            if fresh:
                self.close()
                self.c = http.client.HTTPConnection(HOST, self.bench.port, timeout=HTTP_TIMEOUT)
                self.epoch = epoch
            try:
                self.c.request(method, "/api/v1/" + route, body=None if body is None else json.dumps(body), headers=h)
                r = self.c.getresponse()
                data = r.read()
                break
            except (socket.timeout, TimeoutError) as e:
                self.close()
                raise Hang("%s %s: no answer within %d s (%s)" % (method, route, HTTP_TIMEOUT, e))
            except (OSError, http.client.HTTPException) as e:
                self.close()
                if fresh or attempt == 1:
                    raise Down("%s: %s" % (type(e).__name__, e))
                self.bench.event("reused_connections_failed_then_reopened")  # idle-closed, or the kill
        try:
            parsed = json.loads(data) if data else None
        except ValueError:
            parsed = {"unparsed": data[:2000].decode("utf-8", "replace")}
        self.bench.count_http(route, r.status)
        return r.status, parsed, r.getheader("Retry-After"), epoch


def error_text(js):
    if isinstance(js, dict):
        return str(js.get("error", js))[:1000]
    return str(js)[:1000]


class Bench:
    """What the clients share: the server's port and epoch, and every record."""

    def __init__(self):
        self.lock = threading.Lock()
        self.port = 0
        self.epoch = 0        # the server process: 0, then one more per restart
        self.down = False     # between a kill and the restarted server's listening
        self.stop = threading.Event()
        self.t0 = time.monotonic()
        self.ops = []         # (kind, outcome, seconds, lived through a kill)
        self.http = Counter()  # (route, status)
        self.events = Counter()
        self.failures = []
        self.lost_at_kill = {}   # model id -> the kill whose state.json said it was in memory
        self.revivable = {}      # model id -> the kill after which it continues from disk
        self.weights = []        # acknowledged weights/ paths: (path, rank)
        self.samplers = []       # acknowledged sampler_weights/ paths: (path, rank)
        self.named_mismatch = []

    def now(self):
        return round(time.monotonic() - self.t0, 3)

    def count_http(self, route, status):
        with self.lock:
            self.http[(route, status)] += 1

    def event(self, name, n=1):
        with self.lock:
            self.events[name] += n

    def fail(self, what, **details):
        with self.lock:
            self.failures.append(dict({"what": what, "t": self.now(), "epoch": self.epoch}, **details))


class Client(threading.Thread):
    """One simulated SDK user: a session, its models, its checkpoints."""

    def __init__(self, bench, idx, seed, base_model, vocab):
        super().__init__(daemon=True)
        self.bench, self.idx, self.base, self.vocab = bench, idx, base_model, vocab
        self.rng = random.Random(seed * 100003 + idx)
        self.conn = Conn(bench)
        self.session = None
        self.session_epoch = 0
        self.model_seq = 0  # create_model's model_seq_id in the session
        self.models = []    # in rotation (dicts: see create_model)
        self.weights = []   # (path, rank) this client's acknowledged weights/ checkpoints
        self.samplers = []
        self.names = 0
        self.idem = 0
        self.last_heartbeat = 0.0
        self.current = None  # what the client is doing (for a hang's report)

    # --- HTTP with the SDK's retries -------------------------------------------------

    def note_down(self, route, err, epoch):
        b = self.bench
        with b.lock:
            expected = b.down or b.epoch != epoch
        if expected:
            b.event("connection_errors_while_restarting")
        else:
            b.fail("connection error while the server was up", route=route, error=str(err))

    def post(self, route, body):
        """The answer to a POST, sent again (same body, same X-Idempotency-Key) after a
        connection error, a 429 or a 409 "still being handled". (status, body, epoch)."""
        self.idem += 1
        key = "soak-%d-%d" % (self.idx, self.idem)
        delay = 0.05
        while True:
            epoch = self.bench.epoch
            try:
                st, js, retry_after, epoch = self.conn.request("POST", route, body, {"X-Idempotency-Key": key})
            except Down as e:
                self.note_down(route, e, epoch)
                self.lived_through_kill = True
                time.sleep(delay)
                delay = min(1.0, delay * 2)
                continue
            if st == 429 or (st == 409 and "still being handled" in error_text(js)):
                self.bench.event("retried_%d" % st)
                time.sleep(float(retry_after or delay))
                continue
            return st, js, epoch

    def wait(self, route, future, epoch):
        """A future's result: (200, result) or (status, body); ("lost", body) when it was
        submitted to an earlier server process."""
        rid = future["request_id"]
        delay = 0.05
        while True:
            e = self.bench.epoch
            try:
                st, js, _, e = self.conn.request("POST", "retrieve_future", {"request_id": rid})
            except Down as err:
                self.note_down("retrieve_future", err, e)
                self.lived_through_kill = True
                time.sleep(delay)
                delay = min(1.0, delay * 2)
                continue
            if st == 200 and isinstance(js, dict) and js.get("type") == "try_again":
                self.bench.event("try_again")
                continue
            if st == 404 and e != epoch:
                return "lost", js
            return st, js

    def call(self, kind, route, body, model=None):
        """Submits, waits, records. (outcome, body): outcome 200, "lost" or an HTTP status."""
        self.current = {"kind": kind, "since": self.bench.now(), "model": model and model["id"]}
        self.lived_through_kill = False
        t0 = time.monotonic()
        st, js, epoch = self.post(route, body)
        if model is not None and model.get("touched") != self.bench.epoch and st in (200, 410):
            self.first_touch(model, st, js)
        if st == 200 and isinstance(js, dict) and "request_id" in js:
            st, js = self.wait(route, js, epoch)
        dt = time.monotonic() - t0
        with self.bench.lock:
            self.bench.ops.append((kind, st, dt, self.lived_through_kill, self.idx))
        self.current = None
        if st == 200 and isinstance(js, dict) and "error" in js:
            self.bench.fail("a future failed", kind=kind, model=model and model["id"], answer=error_text(js))
            return "future_error", js
        if st == "lost":
            self.bench.event("futures_lost_to_a_restart")
        return st, js

    def first_touch(self, model, st, js):
        """The first answer about `model` from this server process."""
        b = self.bench
        model["touched"] = b.epoch
        before = model["epoch"] < b.epoch
        revived = before and b.revivable.get(model["id"]) == b.epoch - 1
        if st == 200 and before and b.lost_at_kill.get(model["id"]) == b.epoch - 1:
            b.fail("a model the kill found in memory and changed answered 200", model=model["id"], answer=js)
        if st == 200 and revived:
            if "message" in js:
                b.event("models_continued_from_disk_with_message")
            else:
                b.fail("a model continued from disk without a message", model=model["id"], answer=js)

    # --- the client's loop ------------------------------------------------------------

    def run(self):
        try:
            self.loop()
        except Hang as e:
            self.bench.fail("hang", client=self.idx, error=str(e), doing=self.current)
        except Exception:  # a bug of this script: reported, never hidden
            self.bench.fail("client crashed", client=self.idx, error=traceback.format_exc()[-2000:])

    def loop(self):
        self.open_session()
        self.create_model(self.rng.choice(RANKS))
        kinds = [k for k, _ in MIX]
        weights = [w for _, w in MIX]
        while not self.bench.stop.is_set():
            if time.monotonic() - self.last_heartbeat > 10:
                self.heartbeat()
            kind = self.rng.choices(kinds, weights)[0]
            if not self.models:
                self.create_model(self.rng.choice(RANKS))
                continue
            model = self.models[-1] if len(self.models) == 1 or self.rng.random() < 0.75 else \
                self.rng.choice(self.models[:-1])
            getattr(self, "op_" + kind)(model)

    def unexpected(self, kind, st, js, model=None, body=None):
        what = "5xx" if isinstance(st, int) and st >= 500 else "unexpected %s" % st
        self.bench.fail(what, kind=kind, status=st, model=model and model["id"], answer=error_text(js),
                        request=json.dumps(body)[:500] if body is not None else None)

    def session_gone(self, st, js):
        return st == 404 and "no session" in error_text(js) and self.session_epoch != self.bench.epoch

    def open_session(self):
        while True:
            st, js = self.call("create_session", "create_session",
                               {"tags": ["soak"], "user_metadata": None, "sdk_version": "0.16.1"})
            if st == 200:
                self.session, self.session_epoch, self.model_seq = js["session_id"], self.bench.epoch, 0
                self.last_heartbeat = time.monotonic()
                return
            self.unexpected("create_session", st, js)
            time.sleep(1)

    def heartbeat(self):
        st, js = self.call("session_heartbeat", "session_heartbeat", {"session_id": self.session})
        self.last_heartbeat = time.monotonic()
        if st == 200:
            return
        if self.session_gone(st, js):
            self.bench.event("sessions_lost_to_a_restart")
            self.open_session()
            return
        self.unexpected("session_heartbeat", st, js)

    def create_model(self, rank, load=None):
        """A new model in rotation (continuing from weights/ path `load`, with its optimizer
        state, when given); None when that failed (reported)."""
        while True:
            body = {"session_id": self.session, "model_seq_id": self.model_seq, "base_model": self.base,
                    "lora_config": {"rank": rank, "seed": self.rng.randrange(1 << 30)}}
            self.model_seq += 1
            st, js = self.call("create_model", "create_model", body)
            if self.session_gone(st, js):
                self.bench.event("sessions_lost_to_a_restart")
                self.open_session()
                continue
            break
        if st not in (200, "lost"):
            self.unexpected("create_model", st, js, body=body)
            return None
        model_id = js.get("model_id") if st == 200 else None
        if st == "lost":  # its id came with the submit's answer; recorded by the server on disk
            return None
        # saves: its acknowledged weights/ saves; origin: the checkpoint it continued from
        m = {"id": model_id, "rank": rank, "seq": 0, "saves": [], "origin": load, "epoch": self.bench.epoch,
             "touched": self.bench.epoch}
        self.models.append(m)
        if len(self.models) > 4:
            self.models.pop(0)  # out of rotation (it stays on the server, paged out)
        if load is not None:
            st, js = self.model_call("load_weights", m, {"path": load, "optimizer": True})
            if st != 200:
                m["origin"] = None
        return m

    def model_call(self, kind, model, fields):
        """A request on `model` with its next seq_id. A 410 for a model the kill lost is
        handled here: the model is replaced by its continuation."""
        model["seq"] += 1
        body = dict({"model_id": model["id"], "seq_id": model["seq"]}, **fields)
        st, js = self.call(kind, kind, body, model)
        if st == 410:
            b = self.bench
            if b.lost_at_kill.get(model["id"]) is not None and model["epoch"] <= b.lost_at_kill[model["id"]]:
                self.continue_lost(model, js)
                return "lost_model", js
            self.unexpected(kind, st, js, model, body)
            return st, js
        if st not in (200, "lost", "future_error"):
            self.unexpected(kind, st, js, model, body)
        return st, js

    def continue_lost(self, model, js):
        b = self.bench
        b.event("models_lost_to_a_sigkill")
        # Its newest acknowledged save; without one, the checkpoint it continued from.
        newest = model["saves"][-1] if model["saves"] else model["origin"]
        named = re.search(r"tinker://[A-Za-z0-9._-]+/weights/[A-Za-z0-9._-]+", error_text(js))
        named = named.group(0) if named else None
        if named != newest:
            if named is not None and named not in [p for p, _ in self.weights]:
                why = "the server names a save of this model whose answer the kill lost"
            elif named is None and newest == model["origin"]:
                why = "the model continued from another model's checkpoint and saved none; the server names none"
            else:
                why = "other"
            with b.lock:
                b.named_mismatch.append({"model": model["id"], "server_named": named, "newest_acknowledged": newest,
                                         "why": why})
        if model in self.models:
            self.models.remove(model)
        if newest is None:
            b.event("lost_models_made_afresh")
        else:
            b.event("lost_models_continued_from_checkpoint")
        self.create_model(model["rank"], load=newest)

    def datum(self):
        n = self.rng.randint(8, 32)
        ids = [self.rng.randrange(self.vocab) for _ in range(n)]
        return {"model_input": {"chunks": [{"tokens": ids[:-1]}]},
                "loss_fn_inputs": {"target_tokens": {"data": ids[1:], "dtype": "int64"},
                                   "weights": {"data": [1.0] * (n - 1), "dtype": "float32"}}}

    def op_forward_backward(self, model):
        data = [self.datum() for _ in range(self.rng.randint(1, 4))]
        st, js = self.model_call("forward_backward", model,
                                 {"forward_backward_input": {"data": data, "loss_fn": "cross_entropy"}})
        if st == 200:
            outs = js.get("loss_fn_outputs", [])
            ok = len(outs) == len(data) and all(
                len(o["logprobs"]["data"]) == len(d["model_input"]["chunks"][0]["tokens"]) for o, d in zip(outs, data))
            if not ok or "loss:sum" not in js.get("metrics", {}):
                self.bench.fail("forward_backward: a result of the wrong shape", model=model["id"],
                                answer=json.dumps(js)[:1000])

    def op_optim_step(self, model):
        st, js = self.model_call("optim_step", model, {"adam_params": ADAM})
        if st == 200 and "grad_norm:mean" not in js.get("metrics", {}):
            self.bench.fail("optim_step: no grad_norm:mean", model=model["id"], answer=json.dumps(js)[:1000])

    def save(self, model, sampler):
        self.names += 1
        name = "c%02d-%05d%s" % (self.idx, self.names, "-s" if sampler else "")
        kind = "save_weights_for_sampler" if sampler else "save_weights"
        st, js = self.model_call(kind, model, {"path": name})
        if st != 200:
            return
        want = "tinker://%s/%s/%s" % (model["id"], "sampler_weights" if sampler else "weights", name)
        if js.get("path") != want:
            self.bench.fail(kind + ": an unexpected path", model=model["id"], answer=json.dumps(js)[:500], want=want)
            return
        with self.bench.lock:
            (self.bench.samplers if sampler else self.bench.weights).append((want, model["rank"]))
        if sampler:
            self.samplers.append(want)
        else:
            self.weights.append((want, model["rank"]))
            model["saves"].append(want)

    def op_save_weights(self, model):
        self.save(model, False)

    def op_save_weights_for_sampler(self, model):
        self.save(model, True)

    def op_load_weights(self, model):
        mine = [p for p, r in self.weights if r == model["rank"]]
        if not mine:
            return self.op_forward_backward(model)
        path = self.rng.choice(mine)
        st, js = self.model_call("load_weights", model, {"path": path, "optimizer": self.rng.random() < 0.5})
        if st == 200 and js.get("path") != path:
            self.bench.fail("load_weights: an unexpected path", model=model["id"], answer=json.dumps(js)[:500])

    def op_asample(self, model):
        if not self.samplers:
            return self.op_forward_backward(model)
        path = self.rng.choice(self.samplers)
        n, max_tokens = self.rng.randint(1, 4), self.rng.randint(8, 16)
        prompt = [self.rng.randrange(self.vocab) for _ in range(self.rng.randint(4, 16))]
        body = {"model_path": path, "prompt": {"chunks": [{"tokens": prompt}]}, "num_samples": n,
                "sampling_params": {"max_tokens": max_tokens, "temperature": 1.0, "seed": self.rng.randrange(1 << 30)}}
        st, js = self.call("asample", "asample", body)
        if st == 200:
            seqs = js.get("sequences", [])
            if len(seqs) != n or any(len(s.get("tokens", [])) != max_tokens for s in seqs):
                self.bench.fail("asample: a result of the wrong shape", path=path, answer=json.dumps(js)[:1000])
        elif st not in ("lost", "future_error"):
            self.unexpected("asample", st, js, body=body)

    def op_create_model(self, model):
        self.create_model(self.rng.choice(RANKS))


def read_states(state_dir):
    """model id -> its state.json's "state" ("" when it has none), as a restart finds them."""
    out = {}
    runs = os.path.join(state_dir, "runs")
    for rid in os.listdir(runs):
        st = ""
        p = os.path.join(runs, rid, "state.json")
        try:
            js = json.load(open(p))
            st = js.get("state", "")
            if st == "paged" and not os.path.isdir(os.path.join(runs, rid, js.get("dir", ""))):
                st = "paged-without-dir"
        except (OSError, ValueError):
            pass
        out[rid] = st
    return out


def access_log_counts(paths):
    """(route, status) counts from the servers' access logs, and their 5xx lines."""
    counts, bad = Counter(), []
    pat = re.compile(r"^\S+ \S+ (GET|POST|DELETE|PUT) /api/v1/(\S+) (\d{3}) ")
    for p in paths:
        with open(p, errors="replace") as f:
            for line in f:
                m = pat.match(line)
                if not m:
                    continue
                counts[(m.group(2), int(m.group(3)))] += 1
                if m.group(3).startswith("5"):
                    bad.append(line.strip())
    return counts, bad


def server_notes(paths):
    """The servers' own lines (glint serve: ...) other than the banner, counted by kind."""
    notes = Counter()
    examples = {}
    for p in paths:
        with open(p, errors="replace") as f:
            for line in f:
                if not line.startswith("glint serve: ") or "listening on" in line or "model slots" in line or \
                        line.strip() == "glint serve: stopped":
                    continue
                key = re.sub(r"(run|req|p)-[0-9a-f]{16}", "ID", line.strip())
                key = re.sub(r"\d+", "N", key)
                notes[key] += 1
                examples.setdefault(key, line.strip())
    return [{"line": examples[k], "count": n} for k, n in notes.most_common()]


class Checker:
    """After the run: every acknowledged checkpoint, loaded or sampled from."""

    def __init__(self, bench, base, vocab):
        self.bench, self.base, self.vocab = bench, base, vocab
        self.failed = []
        self.done = Counter()
        self.lock = threading.Lock()

    def worker(self, idx, items):
        c = Client(self.bench, idx, 7, self.base, self.vocab)  # idx: its own X-Idempotency-Keys
        c.open_session()
        for kind, path, rank in items:
            try:
                ok, why = (self.load if kind == "weights" else self.sample)(c, path, rank)
            except Hang as e:
                ok, why = False, str(e)
            with self.lock:
                self.done[kind] += 1
                if not ok:
                    self.failed.append({"kind": kind, "path": path, "rank": rank, "error": why})

    def load(self, c, path, rank):
        body = {"session_id": c.session, "model_seq_id": c.model_seq, "base_model": self.base,
                "lora_config": {"rank": rank, "seed": 0}}
        c.model_seq += 1
        st, js = c.call("check_create_model", "create_model", body)
        if st != 200:
            return False, "create_model: %s %s" % (st, error_text(js))
        mid = js["model_id"]
        st, js = c.call("check_load_weights", "load_weights",
                        {"model_id": mid, "seq_id": 1, "path": path, "optimizer": True})
        ok = st == 200 and js.get("path") == path
        why = None if ok else "load_weights: %s %s" % (st, error_text(js))
        st2, js2 = c.call("check_unload_model", "unload_model", {"model_id": mid})
        if st2 != 200:
            self.bench.fail("unload_model after the check", status=st2, answer=error_text(js2))
        return ok, why

    def sample(self, c, path, rank):
        body = {"model_path": path, "prompt": {"chunks": [{"tokens": [1, 2, 3]}]}, "num_samples": 1,
                "sampling_params": {"max_tokens": 1, "temperature": 1.0, "seed": 0}}
        st, js = c.call("check_asample", "asample", body)
        ok = st == 200 and len(js.get("sequences", [])) == 1
        return ok, None if ok else "asample: %s %s" % (st, error_text(js))

    def run(self, threads=4):
        b = self.bench
        items = [("weights", p, r) for p, r in b.weights] + [("sampler_weights", p, r) for p, r in b.samplers]
        parts = [items[i::threads] for i in range(threads)]
        ts = [threading.Thread(target=self.worker, args=(1000 + i, p), daemon=True) for i, p in enumerate(parts)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        return {"weights": {"checked": self.done["weights"], "acknowledged": len(b.weights)},
                "sampler_weights": {"checked": self.done["sampler_weights"], "acknowledged": len(b.samplers)},
                "failed": self.failed}


def summarize_ops(ops):
    by = defaultdict(list)
    for kind, st, dt, through, _ in ops:
        by[kind].append((st, dt, through))
    out = {}
    for kind, rs in sorted(by.items()):
        timed = [dt for st, dt, through in rs if st == 200 and not through]
        statuses = Counter(str(st) for st, _, _ in rs if st != 200)
        out[kind] = {"count": len(rs), "ok": sum(1 for st, _, _ in rs if st == 200),
                     "lived_through_a_kill": sum(1 for _, _, t in rs if t),
                     "p50_s": round(percentile(timed, 0.5), 4) if timed else None,
                     "p99_s": round(percentile(timed, 0.99), 4) if timed else None,
                     "max_s": round(max(timed), 4) if timed else None,
                     "not_ok_by_outcome": dict(statuses)}
    return out


def run_soak(a, server):
    model = build_model(a.glint, a.work)
    vocab = json.load(open(os.path.join(model, "config.json")))["vocab_size"]
    shutil.rmtree(server.state, ignore_errors=True)
    server.model = model
    bench = Bench()
    start_s = [server.start()]
    bench.port = server.port
    rss = []  # (seconds since the clients started, epoch, VmRSS kB)
    rss_stop = threading.Event()

    def sample_rss():
        while not rss_stop.is_set():
            with bench.lock:
                down, epoch, pid = bench.down, bench.epoch, server.proc.pid
            if not down:
                kb = rss_kb(pid)
                if kb is not None:
                    with bench.lock:
                        rss.append((bench.now(), epoch, kb))
            rss_stop.wait(1.0)

    c0 = Conn(bench)
    st, js, _, _ = c0.request("GET", "get_server_capabilities")
    if st != 200:
        raise BenchError("get_server_capabilities: %s %s" % (st, js))
    base = js["supported_models"][0]["model_name"]
    c0.close()

    bench.t0 = time.monotonic()
    threading.Thread(target=sample_rss, daemon=True).start()
    clients = [Client(bench, i, a.seed, base, vocab) for i in range(a.clients)]
    for c in clients:
        c.start()
    kills = []
    kill_at = [a.duration * (k + 1) / (a.kills + 1) for k in range(a.kills)]
    while True:
        t = time.monotonic() - bench.t0
        if t >= a.duration:
            break
        if server.proc.poll() is not None:
            bench.fail("glint serve exited by itself", status=server.proc.returncode, log=tail(server.logs[-1], 2000))
            break
        if kill_at and t >= kill_at[0]:
            kill_at.pop(0)
            k = len(kills)
            with bench.lock:
                bench.down = True
            pid = server.proc.pid
            t_kill = bench.now()
            server.kill()
            states = read_states(server.state)
            lost = {m for m, s in states.items() if s not in ("paged", "fresh", "unloaded")}
            with bench.lock:
                for m in lost:
                    bench.lost_at_kill[m] = k
                for m, s in states.items():
                    if s in ("paged", "fresh"):
                        bench.revivable[m] = k
            restart_s = server.start()
            start_s.append(restart_s)
            with bench.lock:
                bench.port = server.port
                bench.epoch += 1
                bench.down = False
            kills.append({"at_s": t_kill, "pid": pid, "restart_s": round(restart_s, 3),
                          "models": len(states), "states": dict(Counter(states.values())),
                          "models_in_memory_and_changed": len(lost)})
            continue
        time.sleep(0.2)
    bench.stop.set()
    t_stop = bench.now()
    deadline = time.monotonic() + HTTP_TIMEOUT + 60
    for c in clients:
        c.join(max(0.1, deadline - time.monotonic()))
        if c.is_alive():
            bench.fail("a client did not finish its request within %d s of the end" % (HTTP_TIMEOUT + 60),
                       client=c.idx, doing=c.current)
    rss_end_run = rss_kb(server.proc.pid) if server.proc.poll() is None else None
    t_end_run = bench.now()

    checks = {}
    if server.proc.poll() is None:
        checks["checkpoints"] = Checker(bench, base, vocab).run()
        for f in checks["checkpoints"]["failed"]:
            bench.fail("an acknowledged checkpoint does not load", **f)
    rss_after_checks = rss_kb(server.proc.pid) if server.proc.poll() is None else None
    rss_stop.set()
    code, stop_s = server.terminate() if server.proc.poll() is None else (server.proc.returncode, 0)
    if code != 0:
        bench.fail("glint serve did not stop cleanly on SIGTERM", status=code, log=tail(server.logs[-1], 2000))

    # RSS: the last process's, after its warm-up against the end of the run.
    last_restart = kills[-1]["at_s"] + kills[-1]["restart_s"] if kills else 0.0
    warmup = min(a.warmup, (t_stop - last_restart) / 2)
    last = [(t, kb) for t, e, kb in rss if e == len(kills)]
    warm = [kb for t, kb in last if t >= last_restart + warmup]
    rss_warm = warm[0] if warm else None
    per_epoch = []
    for e in range(len(kills) + 1):
        xs = [kb for t, ep, kb in rss if ep == e]
        if xs:
            per_epoch.append({"epoch": e, "samples": len(xs), "first_mb": round(xs[0] / 1024, 1),
                              "max_mb": round(max(xs) / 1024, 1), "last_mb": round(xs[-1] / 1024, 1)})
    rss_check = {
        "warmup_s": round(warmup, 1),
        "warmup_ends_at_s": round(last_restart + warmup, 1),
        "after_warmup_mb": round(rss_warm / 1024, 1) if rss_warm else None,
        "end_of_run_mb": round(rss_end_run / 1024, 1) if rss_end_run else None,
        "after_checks_mb": round(rss_after_checks / 1024, 1) if rss_after_checks else None,
        "ratio": round(rss_end_run / rss_warm, 3) if rss_warm and rss_end_run else None,
        "per_process": per_epoch,
        "samples_mb": [(t, round(kb / 1024, 1)) for t, e, kb in rss[::10]],
    }
    if rss_check["ratio"] is None:
        bench.fail("RSS: no sample after the warm-up or at the end of the run")
    elif rss_check["ratio"] > 1.10:
        bench.fail("RSS grew more than 10%% after the warm-up: %.1f MB -> %.1f MB"
                   % (rss_warm / 1024, rss_end_run / 1024))

    server_counts, server_5xx = access_log_counts(server.logs)
    for line in server_5xx:
        bench.fail("5xx in the server's access log", line=line)
    # A 410 for every model the clients found lost; none for the others (checked as they came).
    ops = summarize_ops(bench.ops)
    http_by = defaultdict(dict)
    for (route, stt), n in sorted(bench.http.items()):
        http_by[route][str(stt)] = n
    srv_by = defaultdict(dict)
    for (route, stt), n in sorted(server_counts.items()):
        srv_by[route][str(stt)] = n
    requests_total = sum(v["count"] for v in ops.values())
    rec = {
        "clients": a.clients, "duration_s": a.duration, "kills": a.kills, "max_tenants": a.max_tenants,
        "seed": a.seed, "mix": dict(MIX), "ranks": list(RANKS),
        "server_start_s": [round(s, 3) for s in start_s],
        "kill_events": kills,
        "clients_stopped_at_s": t_stop, "run_end_s": t_end_run,
        "operations": requests_total,
        "operations_per_s": round(requests_total / max(t_end_run, 1e-9), 2),
        "requests": ops,
        "http_by_route_and_status": http_by,
        "server_access_log_by_route_and_status": srv_by,
        "expected_events": dict(bench.events),
        "models_created": sum(1 for k, st, _, _, _ in bench.ops if k == "create_model" and st == 200),
        # per client (index): operations that succeeded, the slots' fairness
        "operations_ok_per_client": [sum(1 for k, st, _, _, i in bench.ops if i == c and st == 200
                                         and k != "session_heartbeat") for c in range(a.clients)],
        "checkpoints_acknowledged": {"weights": len(bench.weights), "sampler_weights": len(bench.samplers)},
        "server_named_checkpoint_differs": dict(Counter(m["why"] for m in bench.named_mismatch)),
        "server_named_checkpoint_differs_examples": bench.named_mismatch[:5],
        "rss": rss_check,
        "checks": checks,
        "server_notes": server_notes(server.logs),
        "server_stop": {"status": code, "seconds": round(stop_s, 3)},
        "failures_count": len(bench.failures),
        "failures": bench.failures[:200],
    }
    rec["passed"] = not bench.failures
    return rec


# --- --sampling ----------------------------------------------------------------------

class Api:
    """A plain client for --sampling: one connection, futures waited."""

    def __init__(self, port):
        self.port = port
        self.c = None

    def call(self, route, body=None, method="POST"):
        for attempt in (0, 1):  # a kept-alive connection the server closed meanwhile: once more
            fresh = self.c is None
            if fresh:
                self.c = http.client.HTTPConnection(HOST, self.port, timeout=600)
            try:
                self.c.request(method, "/api/v1/" + route, body=None if body is None else json.dumps(body),
                               headers={"Content-Type": "application/json"})
                r = self.c.getresponse()
                data = r.read()
                break
            except (OSError, http.client.HTTPException):
                self.c.close()
                self.c = None
                if fresh:
                    raise
        js = json.loads(data)
        if r.status != 200:
            raise BenchError("%s: HTTP %d: %s" % (route, r.status, json.dumps(js)[:2000]))
        return js

    def result(self, route, body):
        fut = self.call(route, body)
        while True:
            js = self.call("retrieve_future", {"request_id": fut["request_id"]})
            if js.get("type") == "try_again":
                continue
            if "error" in js:
                raise BenchError("%s: %s" % (route, json.dumps(js)[:2000]))
            return js


def service_round(port, path, prompts, seeds, n, new_tokens):
    """All prompts' asample requests at once, one thread each. (seconds from the first
    submit to the last result, per prompt its samples' tokens, per request its seconds)."""
    out = [None] * len(prompts)
    times = [None] * len(prompts)
    errors = []
    start = threading.Barrier(len(prompts))

    def one(i):
        try:
            api = Api(port)
            start.wait()
            t0 = time.monotonic()
            js = api.result("asample", {"model_path": path, "prompt": {"chunks": [{"tokens": prompts[i]}]},
                                        "num_samples": n,
                                        "sampling_params": {"max_tokens": new_tokens, "temperature": 1.0,
                                                            "seed": seeds[i]}})
            times[i] = (t0, time.monotonic())
            out[i] = [s["tokens"] for s in js["sequences"]]
        except Exception as e:
            errors.append(str(e))

    ts = [threading.Thread(target=one, args=(i,)) for i in range(len(prompts))]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    if errors:
        raise BenchError("asample: " + errors[0])
    for i, seqs in enumerate(out):
        if len(seqs) != n or any(len(s) != new_tokens for s in seqs):
            raise BenchError("asample for prompt %d: %d sequences of %s tokens, not %d of %d"
                             % (i, len(seqs), sorted({len(s) for s in seqs}), n, new_tokens))
    wall = max(t[1] for t in times) - min(t[0] for t in times)
    return wall, out, [round(t[1] - t[0], 3) for t in times]


def generate_one(glint, model, adapter, prompt, seed, new_tokens):
    """One `glint generate`: (tokens, wall seconds, seconds from its first printed token to
    its last)."""
    cmd = [glint, "generate", "--model", model, "--adapter", adapter, "--prompt-ids", " ".join(map(str, prompt)),
           "--max-new-tokens", str(new_tokens), "--temperature", "1", "--seed", str(seed), "--dtype", "float32"]
    t0 = time.monotonic()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
    chunks, t_first, t_last = [], None, None
    fd = p.stdout.fileno()
    while True:
        b = os.read(fd, 65536)
        if not b:
            break
        if b.strip():
            t_last = time.monotonic()
            t_first = t_first or t_last
        chunks.append(b)
    err = p.stderr.read()
    code = p.wait()
    t1 = time.monotonic()
    if code != 0:
        raise BenchError("glint generate exited with status %d: %s" % (code, err.decode(errors="replace")[-2000:]))
    tokens = [int(x) for x in b"".join(chunks).split()]
    return tokens, t1 - t0, (t_last or t1) - (t_first or t1)


def generate_round(a, model, adapter, prompts, seeds):
    tokens, wall, decode, per = [], 0.0, 0.0, []
    for i, prompt in enumerate(prompts):
        mine = []
        for k in range(a.num_samples):
            toks, w, d = generate_one(a.glint, model, adapter, prompt, seeds[i] + k, a.new_tokens)
            if len(toks) != a.new_tokens:
                raise BenchError("glint generate gave %d tokens, not %d" % (len(toks), a.new_tokens))
            mine.append(toks)
            wall += w
            decode += d
            per.append(w)
        tokens.append(mine)
    return wall, decode, tokens, per


# The service's variants --sampling measures: (name, extra glint serve flags, environment).
VARIANTS = {
    "default": ([], {}),
    "threads-1": (["--threads", "1"], {}),                  # one intra-op thread: no OpenMP regions
    "omp-passive": ([], {"OMP_WAIT_POLICY": "passive"}),    # OpenMP threads sleep instead of spinning
    "window-0": (["--cycle-window-ms", "0"], {}),           # no wait for other tenants' requests
}


def asample_once(api, path, prompt, seed, new_tokens, n=1):
    t0 = time.monotonic()
    js = api.result("asample", {"model_path": path, "prompt": {"chunks": [{"tokens": prompt}]}, "num_samples": n,
                                "sampling_params": {"max_tokens": new_tokens, "temperature": 1.0, "seed": seed}})
    return time.monotonic() - t0, js


def run_sampling(a, server):
    model = build_model(a.glint, a.work)
    vocab = json.load(open(os.path.join(model, "config.json")))["vocab_size"]
    shutil.rmtree(server.state, ignore_errors=True)
    server.model = model
    start_s = server.start()
    api = Api(server.port)
    base = api.call("get_server_capabilities", method="GET")["supported_models"][0]["model_name"]
    session = api.call("create_session", {"tags": ["sampling"], "user_metadata": None,
                                          "sdk_version": "0.16.1"})["session_id"]
    mid = api.result("create_model", {"session_id": session, "model_seq_id": 0, "base_model": base,
                                      "lora_config": {"rank": 8, "seed": 0}})["model_id"]
    rng = random.Random(a.seed)
    seq = 0
    for _ in range(4):  # a few steps, so that the adapter is not the identity (LoRA B starts at 0)
        ids = [[rng.randrange(vocab) for _ in range(33)] for _ in range(4)]
        data = [{"model_input": {"chunks": [{"tokens": x[:-1]}]},
                 "loss_fn_inputs": {"target_tokens": {"data": x[1:], "dtype": "int64"},
                                    "weights": {"data": [1.0] * 32, "dtype": "float32"}}} for x in ids]
        api.result("forward_backward", {"model_id": mid, "seq_id": seq + 1,
                                        "forward_backward_input": {"data": data, "loss_fn": "cross_entropy"}})
        api.result("optim_step", {"model_id": mid, "seq_id": seq + 2,
                                  "adam_params": dict(ADAM, learning_rate=1e-2)})
        seq += 2
    path = api.result("save_weights_for_sampler", {"model_id": mid, "seq_id": seq + 1, "path": "sampling"})["path"]
    code, _ = server.terminate()
    if code != 0:
        raise BenchError("glint serve exited with status %s on SIGTERM:\n%s" % (code, tail(server.logs[-1])))
    adapter = os.path.join(server.state, "runs", mid, "sampler_weights", "sampling")
    if not os.path.exists(os.path.join(adapter, "adapter_config.json")):
        raise BenchError("the sampler checkpoint %s is not a PEFT adapter directory (%s)" % (path, adapter))
    prompts = [[rng.randrange(vocab) for _ in range(a.prompt_len)] for _ in range(a.prompts)]
    seeds = [1000 * (i + 1) for i in range(a.prompts)]
    total = a.prompts * a.num_samples * a.new_tokens
    lengths = sorted({max(1, a.new_tokens // 4), max(1, a.new_tokens // 2), a.new_tokens})
    generate_one(a.glint, model, adapter, prompts[0], 0, 1)  # the page cache

    # Each repetition: every service variant (its own server on the same state directory,
    # started, warmed with one 1-token asample that loads the adapter, measured, stopped),
    # then glint generate.
    variants = {v: {"rounds": [], "adapter_load_s": [], "single_request_s": {}} for v in a.variants}
    generates, same, compared = [], 0, 0
    for rep in range(a.repeat):
        for v in a.variants:
            extra, env = VARIANTS[v]
            srv = Server(a.glint, model, a.work, a.max_tenants, extra, env, log_prefix="serve-%s-rep%d" % (v, rep))
            srv.start()
            api = Api(srv.port)
            variants[v]["adapter_load_s"].append(round(asample_once(api, path, prompts[0], 0, 1)[0], 3))
            wall, s_tokens, per_req = service_round(srv.port, path, prompts, seeds, a.num_samples, a.new_tokens)
            variants[v]["rounds"].append({"tokens_per_s": round(total / wall, 1), "wall_s": round(wall, 3),
                                          "request_s": per_req})
            for t in lengths:  # one request of one sample: how its time grows with its length
                for _ in range(2):
                    dt, _ = asample_once(api, path, prompts[0], seeds[0], t)
                    old = variants[v]["single_request_s"].get(t)
                    variants[v]["single_request_s"][t] = round(dt if old is None else min(old, dt), 3)
            if v == a.variants[0]:
                first_tokens = s_tokens
            code, _ = srv.terminate()
            if code != 0:
                raise BenchError("glint serve (%s) exited with status %s on SIGTERM:\n%s" % (v, code, tail(srv.logs[-1])))
        g_wall, g_decode, g_tokens, per = generate_round(a, model, adapter, prompts, seeds)
        decoded = a.prompts * a.num_samples * (a.new_tokens - 1)
        generates.append({"tokens_per_s_wall": round(total / g_wall, 1), "wall_s": round(g_wall, 3),
                          "tokens_per_s_decode": round(decoded / g_decode, 1), "decode_s": round(g_decode, 3),
                          "process_s_p50": round(percentile(per, 0.5), 3)})
        for s_, g in zip(first_tokens, g_tokens):
            for x, y in zip(s_, g):
                compared += 1
                same += x == y
    g_single = {}
    for t in lengths:
        best = min(generate_one(a.glint, model, adapter, prompts[0], seeds[0], t)[1:] for _ in range(2 * a.repeat))
        g_single[t] = {"wall_s": round(best[0], 3), "decode_s": round(best[1], 3)}

    best_g_wall = max(g["tokens_per_s_wall"] for g in generates)
    best_g_decode = max(g["tokens_per_s_decode"] for g in generates)
    service = {}
    for v, r in variants.items():
        best = max(r["rounds"], key=lambda x: x["tokens_per_s"])
        service[v] = {"tokens_per_s": best["tokens_per_s"], "wall_s": best["wall_s"], "request_s": best["request_s"],
                      "ratio_over_generate_wall": round(best["tokens_per_s"] / best_g_wall, 3),
                      "ratio_over_generate_decode": round(best["tokens_per_s"] / best_g_decode, 3),
                      "adapter_load_s": r["adapter_load_s"],
                      "single_request_s": r["single_request_s"],
                      "repetitions_tokens_per_s": [x["tokens_per_s"] for x in r["rounds"]]}
    rec = {
        "prompts": a.prompts, "prompt_len": a.prompt_len, "num_samples": a.num_samples, "new_tokens": a.new_tokens,
        "repeat": a.repeat, "tokens_per_round": total, "server_start_s": round(start_s, 3),
        "adapter": {"path": path, "dir": adapter},
        "service": service,
        "generate": {"tokens_per_s_wall": best_g_wall, "tokens_per_s_decode": best_g_decode,
                     "single_request_s": g_single,
                     "repetitions": generates},
        "same_tokens": {"samples": compared, "identical": same},
    }
    main_v = a.variants[0]
    rec["ratio_service_over_generate"] = {"variant": main_v, "wall": service[main_v]["ratio_over_generate_wall"],
                                          "decode": service[main_v]["ratio_over_generate_decode"]}
    rec["passed"] = rec["ratio_service_over_generate"]["decode"] >= 0.9 and same == compared
    return rec


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("glint")
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--duration", type=float, default=600, help="seconds of the clients' loops")
    ap.add_argument("--kills", type=int, default=2, help="SIGKILLs and restarts, evenly spread over the run")
    ap.add_argument("--max-tenants", type=int, default=4)
    ap.add_argument("--warmup", type=float, default=60, help="seconds after the last restart before RSS is compared")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--sampling", action="store_true", help="measure sampling throughput against glint generate")
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--prompt-len", type=int, default=16)
    ap.add_argument("--num-samples", type=int, default=16)
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--variants", default="default,threads-1,omp-passive,window-0",
                    help="--sampling: the service's variants, the first one checked (%s)" % ", ".join(VARIANTS))
    ap.add_argument("--work", default="/tmp/glint-bench-soak")
    a = ap.parse_args()
    if a.clients < 1 or a.duration <= 0 or a.kills < 0 or a.max_tenants < 1 or a.repeat < 1 or a.prompts < 1 \
            or a.num_samples < 1 or a.new_tokens < 1 or a.prompt_len < 1:
        ap.error("counts and durations must be positive (--kills may be 0)")
    a.variants = [v for v in a.variants.split(",") if v]
    if not a.variants or any(v not in VARIANTS for v in a.variants):
        ap.error("--variants: a comma-separated list of %s" % ", ".join(VARIANTS))
    a.glint = os.path.abspath(a.glint)
    os.makedirs(a.work, exist_ok=True)
    signal.signal(signal.SIGTERM, on_sigterm)
    server = Server(a.glint, None, a.work, a.max_tenants)
    try:
        rec = run_sampling(a, server) if a.sampling else run_soak(a, server)
    except BenchError as e:
        print("bench/service/soak: " + str(e), file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("bench/service/soak: interrupted", file=sys.stderr)
        return 130
    finally:
        for srv in SERVERS:
            srv.cleanup()
    print(json.dumps(rec), flush=True)
    return 0 if rec["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
