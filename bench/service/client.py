#!/usr/bin/env python3
"""One client of the service benchmark: the Tinker SDK's supervised fine-tuning loop
against a running `glint serve`, on its own LoRA model, written from the SDK's request
shapes (v0.16.1: JSON over HTTP under /api/v1).

Usage: client.py --port P --data FILE --steps S --batch B --rank R --seed N --out FILE
       [--lr LR] [--timeout SECONDS]

It opens a session, creates a LoRA model (rank R, seed N) and then, for each step,
submits one forward_backward of B datums (the next B lines of FILE, cycling; every
target weighted 1 / the step's label tokens, as glint train normalises a step) and one
optim_step, and only then waits for both, as the SDK's loop does. Every future is
resolved by polling retrieve_future (try_again: poll again at once; the server holds
each poll up to its --poll-seconds).

Times are time.monotonic() (CLOCK_MONOTONIC: one clock for every process on the
machine), so run.py can put the clients' loops on one time line. The result goes to
--out as one JSON object; on any failure the client prints the reason to stderr and
exits 1."""
import argparse
import json
import os
import sys
import time

import requests


class ClientFailure(Exception):
    pass


class Tinker:
    def __init__(self, port, timeout):
        self.base = "http://127.0.0.1:%d/api/v1/" % port
        self.http = requests.Session()  # one keep-alive connection
        self.timeout = timeout
        self.http_requests = 0
        self.try_again = 0
        self.too_many = 0

    def _check(self, route, r):
        try:
            body = r.json()
        except ValueError:
            body = None
        if r.status_code != 200 or not isinstance(body, dict):
            raise ClientFailure("%s: HTTP %d: %s" % (route, r.status_code, r.text[:2000]))
        return body

    def post(self, route, body):
        while True:
            self.http_requests += 1
            r = self.http.post(self.base + route, json=body, timeout=self.timeout)
            if r.status_code == 429:  # the server's queue is full: as the SDK, wait and retry
                self.too_many += 1
                time.sleep(float(r.headers.get("Retry-After", "1")))
                continue
            return self._check(route, r)

    def get(self, route):
        self.http_requests += 1
        return self._check(route, self.http.get(self.base + route, timeout=self.timeout))

    def wait(self, route, future, deadline):
        """The result of a future (a dict without "error"), polling retrieve_future."""
        if "request_id" not in future:
            raise ClientFailure("%s: no request_id in %s" % (route, json.dumps(future)[:2000]))
        while True:
            if time.monotonic() > deadline:
                raise ClientFailure("%s: request %s still unfinished at the client's --timeout"
                                    % (route, future["request_id"]))
            res = self.post("retrieve_future", {"request_id": future["request_id"]})
            if res.get("type") == "try_again":
                self.try_again += 1
                continue
            if "error" in res:
                raise ClientFailure("%s: request %s failed: %s" % (route, future["request_id"], json.dumps(res)[:2000]))
            return res


def datum(ids, weight):
    """A cross-entropy Datum from a whole sequence: input ids[:-1], targets ids[1:]."""
    inp, target = ids[:-1], ids[1:]
    return {"model_input": {"chunks": [{"tokens": inp}]},
            "loss_fn_inputs": {"target_tokens": {"data": target, "dtype": "int64"},
                               "weights": {"data": [weight] * len(target), "dtype": "float32"}}}


def run(a):
    deadline = time.monotonic() + a.timeout
    lines = [json.loads(l)["input_ids"] for l in open(a.data) if l.strip()]
    if len(lines) < 1:
        raise ClientFailure("%s: no data" % a.data)
    api = Tinker(a.port, a.timeout)
    t_start = time.monotonic()
    base = api.get("get_server_capabilities")["supported_models"][0]["model_name"]
    session = api.post("create_session", {"tags": [], "user_metadata": None, "sdk_version": "0.16.1"})["session_id"]
    fut = api.post("create_model", {"session_id": session, "model_seq_id": 0, "base_model": base,
                                    "lora_config": {"rank": a.rank, "seed": a.seed}})
    model_id = api.wait("create_model", fut, deadline).get("model_id")
    if not model_id:
        raise ClientFailure("create_model: no model_id")
    t_ready = time.monotonic()
    # The same AdamW as glint train's defaults (beta2 0.999, eps 1e-8, clipping at 1), so
    # the reference run does the same work.
    adam = {"learning_rate": a.lr, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8, "weight_decay": 0.0,
            "grad_clip_norm": 1.0}
    seq = 1
    nxt = 0
    steps = []
    for step in range(a.steps):
        batch = [lines[(nxt + i) % len(lines)] for i in range(a.batch)]
        nxt = (nxt + a.batch) % len(lines)
        label_tokens = sum(len(ids) - 1 for ids in batch)  # = the input tokens: every target counts
        data = [datum(ids, 1.0 / label_tokens) for ids in batch]
        t0 = time.monotonic()
        fb = api.post("forward_backward", {"model_id": model_id, "seq_id": seq,
                                           "forward_backward_input": {"data": data, "loss_fn": "cross_entropy"}})
        t_fb_sent = time.monotonic()
        op = api.post("optim_step", {"model_id": model_id, "seq_id": seq + 1, "adam_params": adam})
        seq += 2
        fb_res = api.wait("forward_backward", fb, deadline)
        t_fb = time.monotonic()
        op_res = api.wait("optim_step", op, deadline)
        t1 = time.monotonic()
        loss = fb_res.get("metrics", {}).get("loss:sum")
        if loss is None or len(fb_res.get("loss_fn_outputs", [])) != a.batch:
            raise ClientFailure("forward_backward: unexpected result %s" % json.dumps(fb_res)[:2000])
        steps.append({"start": t0, "end": t1, "forward_backward_s": t_fb - t0, "submit_s": t_fb_sent - t0,
                      "step_s": t1 - t0, "loss": loss, "input_tokens": label_tokens,
                      "grad_norm": op_res.get("metrics", {}).get("grad_norm:mean")})
    t_end = time.monotonic()
    return {"model_id": model_id, "start": t_start, "ready": t_ready, "end": t_end,
            "setup_s": t_ready - t_start, "loop_s": t_end - t_ready, "steps": steps,
            "http_requests": api.http_requests, "try_again": api.try_again, "too_many_requests": api.too_many}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--steps", type=int, required=True)
    ap.add_argument("--batch", type=int, required=True)
    ap.add_argument("--rank", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--lr", type=float, default=2e-4)
    ap.add_argument("--timeout", type=float, default=600, help="seconds for the whole client")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    try:
        result = run(a)
    except ClientFailure as e:
        print("client %s: %s" % (a.data, e), file=sys.stderr)
        return 1
    except requests.RequestException as e:
        print("client %s: HTTP error: %s" % (a.data, e), file=sys.stderr)
        return 1
    with open(a.out + ".partial", "w") as f:
        json.dump(result, f)
    os.replace(a.out + ".partial", a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
