#!/usr/bin/env python3
"""Writes the hand-made seed inputs of the fuzz targets into tests/fuzz/corpus/NAME/
(seed-* files; regression-* files are added one by one as bugs are fixed and are never
rewritten here). Seeds that glint itself must write (a saved adapter, each family's
config.json, the built-in chat template) come from the targets' GLINT_FUZZ_WRITE_SEEDS
hook; see docs/RELIABILITY.md."""
import json
import os
import struct

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CORPUS = os.path.join(ROOT, "tests", "fuzz", "corpus")


def put(target, name, data):
    d = os.path.join(CORPUS, target)
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode("utf-8")
    with open(os.path.join(d, "seed-" + name), "wb") as f:
        f.write(data)


def read(*parts):
    with open(os.path.join(ROOT, *parts), "rb") as f:
        return f.read()


# safetensors ---------------------------------------------------------------------------
SIZES = {"F32": 4, "F64": 8, "BF16": 2, "F16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1,
         "BOOL": 1, "F8_E4M3": 1, "F8_E8M0": 1}


def safetensors(tensors, metadata=None):
    header, data = {}, b""
    for name, dtype, shape in tensors:
        n = 1
        for s in shape:
            n *= s
        nbytes = n * SIZES[dtype]
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + nbytes]}
        data += bytes((i * 7 + 3) % 256 for i in range(nbytes))
    if metadata is not None:
        header["__metadata__"] = metadata
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    return struct.pack("<Q", len(h)) + h + data


put("safetensors", "f32", safetensors([("w", "F32", [2, 3])], {"format": "pt"}))
put("safetensors", "mixed", safetensors([("a.weight", "BF16", [4, 2]), ("b", "I64", [3]), ("c", "F16", [1, 1, 2]),
                                         ("d", "BOOL", [5]), ("e", "F64", [2, 2])]))
put("safetensors", "scalar-empty", safetensors([("s", "F32", []), ("z", "I32", [0, 4]), ("u", "U8", [7])]))
put("safetensors", "fp8", safetensors([("q", "F8_E4M3", [4, 4]), ("scale", "F8_E8M0", [4, 1]), ("i", "I8", [3]),
                                       ("h", "I16", [2])]))
put("safetensors", "empty", safetensors([], {}))

# tokenizer.json -------------------------------------------------------------------------
fixture = json.loads(read("tests", "data", "tokenizer_fixture", "tokenizer.json"))
put("tokenizer_load", "fixture", json.dumps(fixture, ensure_ascii=False))
v = json.loads(json.dumps(fixture))
v["normalizer"] = {"type": "Sequence", "normalizers": [{"type": "NFKC"}, {"type": "NFD"}]}
v["post_processor"] = {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<|im_start|>", "type_id": 0}},
                                                                  {"Sequence": {"id": "A", "type_id": 0}}],
                       "pair": [], "special_tokens": {"<|im_start|>": {"id": "<|im_start|>", "ids": [269],
                                                                        "tokens": ["<|im_start|>"]}}}
v["model"]["merges"] = [m.split(" ") if isinstance(m, str) else m for m in v["model"]["merges"]]
put("tokenizer_load", "variant-pairs-template", json.dumps(v, ensure_ascii=False))
v = json.loads(json.dumps(fixture))
v["normalizer"] = None
v["pre_tokenizer"] = {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True}
v["post_processor"] = {"type": "Sequence", "processors": [{"type": "ByteLevel", "add_prefix_space": True,
                                                           "trim_offsets": False, "use_regex": True},
                                                          {"type": "RobertaProcessing", "sep": ["<|im_end|>", 270],
                                                           "cls": ["<|im_start|>", 269], "trim_offsets": False,
                                                           "add_prefix_space": False}]}
v["model"]["ignore_merges"] = True
put("tokenizer_load", "variant-bytelevel-roberta", json.dumps(v, ensure_ascii=False))
v = json.loads(json.dumps(fixture))
v["post_processor"] = {"type": "BertProcessing", "sep": ["<|im_end|>", 270], "cls": ["<|im_start|>", 269]}
v["added_tokens"].append({"id": 274, "content": " spaced ", "single_word": False, "lstrip": True, "rstrip": True,
                          "normalized": True, "special": False})
put("tokenizer_load", "variant-bert-added", json.dumps(v, ensure_ascii=False))

# texts to tokenize -----------------------------------------------------------------------
for i, text in enumerate([
        "Hello world, it's a test.",
        "<|im_start|>user\nWhat's the cat's café?<|im_end|>\n<|im_start|>assistant\n",
        "  leading and trailing  \r\n\r\n\t tabs  ",
        "cat catalog concat <mask>  <mask>cat",
        "\u4f60\u597d\uff0c\u4e16\u754c\uff01 \U0001F600\U0001F44D\u200d caf\u0065\u0301 \u00c5ngstr\u00f6m \ufb01",
        "1234567890 3.14159 -42 0x1F",
        "'s 't 're 've 'm 'll 'd 'S 'T",
        ""]):
    put("tokenizer_encode", "text-%d" % i, text)

# chat templates ---------------------------------------------------------------------------
put("chat_template", "tool_use", read("tests", "reference", "template_fixtures", "tool_use.jinja"))
put("chat_template", "default", read("tests", "reference", "template_fixtures", "default.jinja"))
for i, t in enumerate([
        "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}",
        "{%- set ns = namespace(n=0) -%}{%- for m in messages | reverse -%}{%- set ns.n = ns.n + loop.index -%}"
        "{{ loop.index0 }}:{{ m['role'] | upper }}{{ ' ' if not loop.last else '' }}{%- endfor -%}{{ ns.n }}",
        "{% macro f(x, y='d') %}[{{ x }}|{{ y }}]{% endmacro %}{{ f(1) }}{{ f('a', y=2) }}"
        "{% call(z) f(3) %}{{ z }}{% endcall %}",
        "{{ tools | tojson(indent=2) }}{{ messages[0].content[:5] ~ '...' }}{{ (3 // 2) ** 2 % 5 }}"
        "{{ 'a,b' .split(',') | join('-') }}{{ {'k': [1, 2.5, none, true]} | tojson }}",
        "{% if messages[0]['role'] == 'system' %}{{ raise_exception('no system') }}{% endif %}"
        "{% for k, v in {'b': 1, 'a': 2} | dictsort %}{{ k }}{{ v }}{% else %}none{% endfor %}",
        "{% raw %}{{ not parsed }}{% endraw %}{# comment #}{%- filter upper -%}x{%- endfilter -%}"
        "{{ messages | selectattr('role', 'equalto', 'user') | map(attribute='content') | list | length }}",
        "{% set x = [1, 2, 3] %}{{ x | first }}{{ x | last }}{{ x[-1] }}{{ x | sum }}{{ range(3) | list }}"
        "{{ 'abc' is string }}{{ none is none }}{{ 10 is divisibleby 3 }}{{ '%s-%d' | format('a', 3) }}",
        "{%- for m in messages -%}{%- if m.tool_calls is defined -%}{%- for c in m.tool_calls -%}"
        "{{ c.function.name }}({{ c.function.arguments | tojson }}){%- endfor -%}{%- endif -%}"
        "{{ m.content.strip() if m.content is string else m.content | length }}{{ m.get('name', '?') }}{%- endfor -%}"
        "{{ strftime_now('%Y') | length }}"]):
    put("chat_template", "snippet-%d" % i, t)

# conversations ----------------------------------------------------------------------------
cases = json.loads(read("tests", "data", "deepseek_v4_chat", "cases.json"))
for c in cases:
    seed = {"messages": c["messages"], "add_generation_prompt": c.get("add_generation_prompt", False)}
    if "tools" in c:
        seed["tools"] = c["tools"]
    if "enable_thinking" in c.get("variables", {}):
        seed["enable_thinking"] = c["variables"]["enable_thinking"]
    put("chat_render", c["name"], json.dumps(seed, ensure_ascii=False))
put("chat_render", "plain-list", json.dumps([{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]))

# training data JSONL ----------------------------------------------------------------------
def jsonl(*lines):
    return "".join(json.dumps(l, ensure_ascii=False) + "\n" for l in lines)


tools = [{"type": "function", "function": {"name": "get_weather", "description": "Weather.",
                                            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]
put("jsonl_data", "messages", jsonl(
    {"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Capital of France?"},
                  {"role": "assistant", "content": "Paris."}]},
    {"messages": [{"role": "user", "content": "Weather in Paris?"},
                  {"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": {
                      "name": "get_weather", "arguments": {"city": "Paris"}}}]},
                  {"role": "tool", "content": "21 C"}, {"role": "assistant", "content": "21 C."}], "tools": tools}))
put("jsonl_data", "sharegpt", jsonl(
    {"conversations": [{"from": "human", "value": "hi"}, {"from": "gpt", "value": "hello"}], "system": "sys"},
    {"conversations": [{"from": "user", "value": "weather?"},
                       {"from": "function_call", "value": json.dumps({"name": "get_weather", "arguments": {"city": "X"}})},
                       {"from": "observation", "value": "sunny"}, {"from": "gpt", "value": "Sunny."}],
     "tools": json.dumps(tools)}))
put("jsonl_data", "alpaca", jsonl(
    {"instruction": "Reverse", "input": "123", "output": "321", "system": "digits",
     "history": [["a", "b"], ["c", "d"]]},
    {"instruction": "Say hi", "output": "hi"}))
put("jsonl_data", "prompt-completion", jsonl({"prompt": "France:", "completion": " Paris"},
                                             {"prompt": "", "completion": "x"}) + "\n\n")
put("jsonl_data", "text", jsonl({"text": "The cat sat."}, {"text": "caf\u00e9 <|im_end|> 12"}))
put("jsonl_data", "mixed-forms", jsonl({"text": "a"}, {"prompt": "b", "completion": "c"},
                                       {"instruction": "d", "output": "e"}))
put("jsonl_data", "tokenized", jsonl({"input_ids": [1, 2, 3, 4], "labels": [-100, -100, 3, 4]},
                                     {"input_ids": [5, 6]}, {"input_ids": [270, 0], "labels": [270, -100]}))

# train --config TOML ----------------------------------------------------------------------
put("toml_config", "basic", """# a run's settings
data = "train.jsonl"
output = "runs/a"
steps = 100
lr = 2e-4
lora-r = 8
lora_alpha = 16.0
lora-targets = ["q_proj", "v_proj", "experts.gate_up_proj"]
pack = true
seq-len = 512
micro_batch_size = 2
""")
put("toml_config", "resolved", """model = ""
tokenizer = ""
data = 'a.jsonl'
eval-data = ""
seed = 7
warmup-steps = 10
min-lr-ratio = 0.1
max-grad-norm = 1.0
weight-decay = 0.0
adam-beta = [0.9, 0.95]
dtype = "float32"
full = false
fsdp = false
ep = 1
tenant = ["name=a,data=a.jsonl,lora-r=4", "name=b,data=b.jsonl"]
enable-thinking = "false"
""")
put("toml_config", "bad-key", "stepz = 3\n[section]\nx = 1\n")

# service requests ---------------------------------------------------------------------------
def request(head, body):
    return head + "\n" + (json.dumps(body) if not isinstance(body, str) else body)


datum = {"model_input": {"chunks": [{"type": "encoded_text", "tokens": [1, 2, 3]}]},
         "loss_fn_inputs": {"target_tokens": {"data": [2, 3, 4], "dtype": "int64", "shape": [3]},
                            "weights": {"data": [1.0, 1.0, 0.5], "dtype": "float32", "shape": [3]}}}
reqs = {
    "healthz": request("GET /api/v1/healthz", ""),
    "capabilities": request("GET /api/v1/get_server_capabilities", ""),
    "client-config": request("POST /api/v1/client/config", {}),
    "create-session": request("POST /api/v1/create_session", {"tags": ["x"], "user_metadata": {"a": 1}}),
    "heartbeat": request("POST /api/v1/session_heartbeat", {"session_id": "$SESSION"}),
    "create-model": request("POST /api/v1/create_model idem-1", {
        "session_id": "$SESSION", "base_model": "tiny", "user_metadata": {"k": "v"},
        "lora_config": {"rank": 4, "seed": 3, "train_mlp": True, "train_attn": False, "train_unembed": True}}),
    "get-info": request("POST /api/v1/get_info", {"model_id": "$MODEL"}),
    "forward-backward": request("POST /api/v1/forward_backward", {
        "model_id": "$MODEL", "seq_id": 1, "forward_backward_input": {"loss_fn": "cross_entropy", "data": [datum]}}),
    "forward-ppo": request("POST /api/v1/forward", {
        "model_id": "$MODEL", "forward_input": {"loss_fn": "ppo", "loss_fn_config": {"clip_low_threshold": 0.8},
                                               "data": [{"model_input": datum["model_input"], "loss_fn_inputs": {
                                                   "target_tokens": datum["loss_fn_inputs"]["target_tokens"],
                                                   "logprobs": {"data": [-1.0, -2.0, -0.5], "dtype": "float32"},
                                                   "advantages": {"data": [1, 0, -1], "dtype": "float32"}}}]}}),
    "optim-step": request("POST /api/v1/optim_step", {
        "model_id": "$MODEL", "seq_id": 2, "adam_params": {"learning_rate": 1e-4, "beta1": 0.9, "beta2": 0.95,
                                                           "eps": 1e-12, "weight_decay": 0.01, "grad_clip_norm": 1.0}}),
    "save-weights": request("POST /api/v1/save_weights", {"model_id": "$MODEL", "path": "step-1", "seq_id": 3}),
    "save-sampler": request("POST /api/v1/save_weights_for_sampler",
                            {"model_id": "$MODEL", "sampling_session_seq_id": 1}),
    "load-weights": request("POST /api/v1/load_weights",
                            {"model_id": "$MODEL", "path": "tinker://$MODEL/weights/step-1", "optimizer": True}),
    "sampling-session": request("POST /api/v1/create_sampling_session", {"session_id": "$SESSION", "base_model": "tiny"}),
    "asample": request("POST /api/v1/asample", {
        "prompt": {"chunks": [{"tokens": [5, 6, 7]}]}, "num_samples": 2, "base_model": "tiny", "prompt_logprobs": True,
        "sampling_params": {"max_tokens": 8, "temperature": 0.7, "top_k": 5, "top_p": 0.9, "seed": 1,
                            "stop": ["<|im_end|>", 3]}}),
    "retrieve": request("POST /api/v1/retrieve_future", {"request_id": "req-0000000000000000"}),
    "weights-info": request("POST /api/v1/weights_info", {"tinker_path": "tinker://$MODEL/sampler_weights/s1"}),
    "unload": request("POST /api/v1/unload_model", {"model_id": "$MODEL"}),
    "runs": request("GET /api/v1/training_runs?limit=5", ""),
    "run": request("GET /api/v1/training_runs/$MODEL", ""),
    "run-checkpoints": request("GET /api/v1/training_runs/$MODEL/checkpoints", ""),
    "delete-checkpoint": request("DELETE /api/v1/training_runs/$MODEL/checkpoints/weights/step-1", ""),
    "checkpoints": request("GET /api/v1/checkpoints", ""),
    "sessions": request("GET /api/v1/sessions/$SESSION", ""),
}
for name, r in reqs.items():
    put("service_request", name, r)

# config.json as the Hub's releases write it (each family's tiny config comes from
# model_config_fuzz's seed hook) ------------------------------------------------------------
put("model_config", "qwen3-moe-hub.json", json.dumps({
    "architectures": ["Qwen3MoeForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
    "bos_token_id": 151643, "decoder_sparse_step": 1, "eos_token_id": 151645, "head_dim": 128,
    "hidden_act": "silu", "hidden_size": 2048, "initializer_range": 0.02, "intermediate_size": 6144,
    "max_position_embeddings": 40960, "max_window_layers": 48, "mlp_only_layers": [], "model_type": "qwen3_moe",
    "moe_intermediate_size": 768, "norm_topk_prob": True, "num_attention_heads": 32, "num_experts": 128,
    "num_experts_per_tok": 8, "num_hidden_layers": 48, "num_key_value_heads": 4, "output_router_logits": False,
    "rms_norm_eps": 1e-06, "rope_scaling": None, "rope_theta": 1000000.0, "router_aux_loss_coef": 0.001,
    "sliding_window": None, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
    "transformers_version": "4.51.0", "use_cache": True, "use_sliding_window": False, "vocab_size": 151936}, indent=2))
put("model_config", "deepseek-v3-yarn.json", json.dumps({
    "architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3", "vocab_size": 129280,
    "hidden_size": 7168, "intermediate_size": 18432, "moe_intermediate_size": 2048, "num_hidden_layers": 61,
    "num_attention_heads": 128, "num_key_value_heads": 128, "n_shared_experts": 1, "n_routed_experts": 256,
    "routed_scaling_factor": 2.5, "kv_lora_rank": 512, "q_lora_rank": 1536, "qk_rope_head_dim": 64,
    "v_head_dim": 128, "qk_nope_head_dim": 128, "topk_method": "noaux_tc", "n_group": 8, "topk_group": 4,
    "num_experts_per_tok": 8, "moe_layer_freq": 1, "first_k_dense_replace": 3, "norm_topk_prob": True,
    "scoring_func": "sigmoid", "hidden_act": "silu", "max_position_embeddings": 163840, "rms_norm_eps": 1e-06,
    "rope_theta": 10000, "rope_scaling": {"beta_fast": 32, "beta_slow": 1, "factor": 40, "mscale": 1.0,
                                          "mscale_all_dim": 1.0, "original_max_position_embeddings": 4096,
                                          "type": "yarn"},
    "tie_word_embeddings": False, "torch_dtype": "bfloat16"}, indent=2))

# protobuf forward_backward bodies (SDK 0.25) --------------------------------------------
def pb_varint(v):
    out = b""
    while v >= 0x80:
        out += bytes([(v & 0x7f) | 0x80])
        v >>= 7
    return out + bytes([v])


def pb_field(number, wire, payload):
    if wire == 2:
        return pb_varint(number << 3 | 2) + pb_varint(len(payload)) + payload
    return pb_varint(number << 3 | wire) + payload


def pb_tensor(values, dtype):
    fmt = "<%df" % len(values) if dtype == 1 else "<%dq" % len(values)
    return (pb_field(1, 2, struct.pack(fmt, *values)) + pb_field(3, 0, pb_varint(dtype)) +
            pb_field(4, 2, pb_varint(len(values))))


def pb_datum(tokens, inputs):
    chunk = pb_field(1, 2, pb_field(1, 2, struct.pack("<%di" % len(tokens), *tokens)))
    d = pb_field(1, 2, chunk)
    for name, (values, dtype) in inputs.items():
        d += pb_field(2, 2, pb_field(1, 2, name.encode()) + pb_field(2, 2, pb_tensor(values, dtype)))
    return d


def pb_request(model, seq, data, loss, config, forward_only):
    m = pb_field(1, 2, model.encode()) + pb_field(2, 0, pb_varint(seq))
    for d in data:
        m += pb_field(3, 2, d)
    m += pb_field(4, 2, loss.encode())
    for k, v in config.items():
        m += pb_field(5, 2, pb_field(1, 2, k.encode()) + pb_field(2, 1, struct.pack("<d", v)))
    if forward_only:
        m += pb_field(6, 0, b"\x01")
    return m


ce = pb_datum([101, 102, 103, 104], {"target_tokens": ([102, 103, 104, 105], 2), "weights": ([0, 1, 1, 1], 1)})
put("tinker_wire", "cross-entropy", pb_request("model-1", 1, [ce], "cross_entropy", {}, False))
put("tinker_wire", "forward-only", pb_request("model-1", 2, [ce, ce], "cross_entropy", {}, True))
put("tinker_wire", "ppo", pb_request("model-1", 3, [pb_datum([1, 2, 3], {
    "target_tokens": ([2, 3, 4], 2), "logprobs": ([-1.0, -2.0, -0.5], 1), "advantages": ([1.0, 0.0, -1.0], 1)})],
    "ppo", {"clip_low_threshold": 0.8, "clip_high_threshold": 1.2}, True))
