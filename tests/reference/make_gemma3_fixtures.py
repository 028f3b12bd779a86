#!/usr/bin/env python3
"""Writes the Gemma 3 270M Q4_K_M fixtures: tokenizer and chat-template parity now, forward-pass oracles for later.

    scripts/fetch_model.sh gemma3      # models/gemma-3-270m-q4_k_m.gguf (sha256 a5fd3b62...6818)
    HF_HUB_OFFLINE=1 /work/venv-hf/bin/python tests/reference/make_gemma3_fixtures.py \
        --llamacpp-python /work/venv-bench/bin/python [--only tokenizer|chat|greedy|perplexity ...]

The script runs with a Python that has transformers (chat templates); everything llama.cpp computes runs in a
worker (this same file, `--worker`) under a Python with llama-cpp-python==0.3.36 (and numpy), 2 threads.

tests/fixtures/gemma3/tokenizer_corpus.json   llama.cpp's Llama(model, vocab_only=True).tokenize(text,
    add_bos=False, special=True) -> ids, and special=False -> ids_plain (only where different), on the shared
    corpus (tokenizer_corpus.corpus_texts()) plus Gemma-specific strings (its control tokens, the user-defined
    whitespace / newline / tab runs and HTML tags, chat markup); `decoded` where detokenize(ids, special=True)
    differs from the text (llama.cpp's decode of the ids, control tokens written out); malformed UTF-8 as hex.
    `with_bos`: a few strings with add_bos=True.
tests/fixtures/gemma3/chat.json   Gemma 3's chat template (the GGUF has none, see TEMPLATE_SOURCE) rendered by
    transformers' render_jinja_template (its Jinja environment: ImmutableSandboxedEnvironment, trim_blocks,
    lstrip_blocks, raise_exception), bos_token "<bos>"; for each case also llama.cpp's built-in "gemma" formatter
    (llama_chat_apply_template), recorded as llamacpp_builtin_agrees ("<bos>" + its output == rendered).
    Same layout as tests/fixtures/chat/*.json, so chat_template_parity_test.cpp reads it like the others.
tests/fixtures/gemma3/greedy.json   llama.cpp greedy continuations (argmax, lowest id on ties; EOS does not stop),
    32 tokens, for raw prompts (with the BOS llama.cpp adds, add_bos=True) and chat-formatted ones.
tests/fixtures/gemma3/perplexity.json   llama.cpp's perplexity on tests/fixtures/text/persuasion_ch1-2.txt, with
    both scoring conventions (see the fixture's `method`).
"""
import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO_ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
OUT_DIR = os.path.join(REPO_ROOT, "tests", "fixtures", "gemma3")
MODEL_NAME = "gemma-3-270m-q4_k_m.gguf"
MODEL_SHA256 = "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"
N_THREADS = 2

# Gemma 3's chat template, exactly as the "chat_template" of google/gemma-3-*-it's tokenizer_config.json. Neither
# this GGUF (made from the base model google/gemma-3-270m: no tokenizer.chat_template key) nor any package
# reachable here ships it; the text is the JSON string quoted in ShishirPatil/gorilla
# berkeley-function-call-leaderboard/bfcl/model_handler/local_inference/gemma.py (GemmaHandler._format_prompt's
# docstring, "bos_token": "<bos>", "chat_template": ...), JSON-unescaped. Several other public copies are identical.
TEMPLATE_SOURCE = ("google/gemma-3 tokenizer_config.json chat_template, as quoted in ShishirPatil/gorilla "
                   "berkeley-function-call-leaderboard/bfcl/model_handler/local_inference/gemma.py")
TEMPLATE = json.loads(
    r'''"{{ bos_token }}\n{%- if messages[0]['role'] == 'system' -%}\n    {%- if messages[0]['content'] is string -%}\n        {%- set first_user_prefix = messages[0]['content'] + '\n\n' -%}\n    {%- else -%}\n        {%- set first_user_prefix = messages[0]['content'][0]['text'] + '\n\n' -%}\n    {%- endif -%}\n    {%- set loop_messages = messages[1:] -%}\n{%- else -%}\n    {%- set first_user_prefix = \"\" -%}\n    {%- set loop_messages = messages -%}\n{%- endif -%}\n{%- for message in loop_messages -%}\n    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}\n        {{ raise_exception(\"Conversation roles must alternate user/assistant/user/assistant/...\") }}\n    {%- endif -%}\n    {%- if (message['role'] == 'assistant') -%}\n        {%- set role = \"model\" -%}\n    {%- else -%}\n        {%- set role = message['role'] -%}\n    {%- endif -%}\n    {{ '<start_of_turn>' + role + '\n' + (first_user_prefix if loop.first else \"\") }}\n    {%- if message['content'] is string -%}\n        {{ message['content'] | trim }}\n    {%- elif message['content'] is iterable -%}\n        {%- for item in message['content'] -%}\n            {%- if item['type'] == 'image' -%}\n                {{ '<start_of_image>' }}\n            {%- elif item['type'] == 'text' -%}\n                {{ item['text'] | trim }}\n            {%- endif -%}\n        {%- endfor -%}\n    {%- else -%}\n        {{ raise_exception(\"Invalid content type\") }}\n    {%- endif -%}\n    {{ '<end_of_turn>\n' }}\n{%- endfor -%}\n{%- if add_generation_prompt -%}\n    {{'<start_of_turn>model\n'}}\n{%- endif -%}\n"''')

# Strings exercising what is special in Gemma's vocabulary, after the shared corpus.
GEMMA_EXTRAS = [
    "<bos>", "<eos>", "<pad>", "<unk>", "<mask>", "<start_of_turn>", "<end_of_turn>", "<start_of_image>",
    "<unused0>", "<unused6241>", "[multimodal]", "<bos>Hello", "Hello<eos>", "a<eos>b", "<eos><eos>",
    "<start_of_turn>user\nWhat is 2+2?<end_of_turn>\n<start_of_turn>model\n",
    "<bos><start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\nHello!<end_of_turn>\n",
    "<start_of_turn>user\n  spaced  \n\n\n<end_of_turn>",
    "\n", "\n\n", "\n\n\n\n\n", "\n" * 31, "\n" * 32, "\n" * 70, " ", "  ", "   ", " " * 31, " " * 32, " " * 65,
    "\t", "\t\t", "\t" * 31, "\t" * 40, "a \n b", "a  \n\n  b", " \n \n ", "\t \n\t\n", "x\n\n\ty  z\t\t\n",
    "<table><tr><td>1</td><td>2</td></tr></table>", "<h1>Title</h1>\n<p>text</p>", "<b>bold</b> <i>it</i> <u>u</u>",
    "<s>strike</s>", "</s>", "<s>", "<strong><em>x</em></strong>", "<code>int x;</code>", "<div><span>a</span></div>",
    "<html><body><img></body></html>", "<bbox>1 2</bbox>", "<ul><li>a</li></ul>", "<sub>2</sub><sup>3</sup>",
    "<tablex>", "< table>", "<TABLE>", "<table", "table>", "<<table>>", "<h7>", "<a href=x>", "<a>",
    "def f(x):\n    return x\n\n\nclass A:\n\tpass\n", "    indented\n        more\n", "a" + " " * 40 + "b",
    "line1\r\nline2\r\n\r\n", "\u2581", "\u2581\u2581x", "x\u2581 y", "▁▁ ▁", "Ġhello", "<0x41>", "<0x0A>",
    "日本語のテキスト、そして 한국어 와 中文。", "emoji 😀👍🏽 👨‍👩‍👧", "ﬁ ﬂ Å Å", "  leading", "trailing  ",
]
# Texts also tokenized with add_bos=True.
WITH_BOS = ["", "Hello", " Hello", "<bos>Hello", "The capital of France is", "<start_of_turn>user\nHi<end_of_turn>\n"]

# Conversations for the chat fixture (every one also rendered with and without the generation prompt).
CONVERSATIONS = [
    [{"role": "user", "content": "Hi!"}],
    [{"role": "user", "content": "What is 2+2?"}, {"role": "assistant", "content": "4"}],
    [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is 2+2?"}],
    [{"role": "system", "content": "You are a pirate."}, {"role": "user", "content": "Hello"},
     {"role": "assistant", "content": "Arr!"}, {"role": "user", "content": "Where is the treasure?"}],
    [{"role": "user", "content": "  padded content \n"}, {"role": "assistant", "content": "\n\nreply\t "}],
    [{"role": "system", "content": "  System with spaces  "}, {"role": "user", "content": "x"}],
    [{"role": "system", "content": "Multi\nline\n\nsystem"}, {"role": "user", "content": "Line one\nLine two"}],
    [{"role": "user", "content": "Café? 你好 😀 — ünïcødé"}, {"role": "assistant", "content": "Oui. 😀"}],
    [{"role": "user", "content": "Write code:\n```python\ndef f():\n    return 1\n```"},
     {"role": "assistant", "content": "```python\nprint(1)\n```"}, {"role": "user", "content": "Thanks"}],
    [{"role": "user", "content": ""}],
    [{"role": "system", "content": ""}, {"role": "user", "content": "empty system"}],
    [{"role": "system", "content": "Only a system message."}],
    [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}, {"role": "user", "content": "c"},
     {"role": "assistant", "content": "d"}, {"role": "user", "content": "e"}, {"role": "assistant", "content": "f"}],
    [{"role": "user", "content": "<start_of_turn>inside<end_of_turn>"}],
    [{"role": "user", "content": "\u3000\u00a0nbsp and ideographic space\u2003"}],
    [{"role": "user", "content": "zero width\u200b"}, {"role": "assistant", "content": "\ufeffbom"}],
]
# Conversations the template refuses (raise_exception): kvstash must refuse them too.
REFUSED = [
    [{"role": "assistant", "content": "I speak first"}],
    [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}],
    [{"role": "system", "content": "s"}, {"role": "assistant", "content": "a"}],
    [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}, {"role": "assistant", "content": "c"}],
]

GREEDY_PROMPTS = [  # name, text, chat-formatted (the text already holds <bos>: add_bos=False, special=True)
    ("plain", "The capital of France is", False),
    ("code", "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n", False),
    ("list", "Three things to pack for a beach holiday:\n1.", False),
    ("story", "Once upon a time, in a small village by the sea, there lived", False),
    ("chat_question", "<bos><start_of_turn>user\nWhat is the tallest mountain in the world?<end_of_turn>\n"
                      "<start_of_turn>model\n", True),
    ("chat_system", "<bos><start_of_turn>user\nAnswer in one word.\n\nWhat colour is the sky on a clear day?"
                    "<end_of_turn>\n<start_of_turn>model\n", True),
]
N_GEN = 32
PPL_TEXT = os.path.join("tests", "fixtures", "text", "persuasion_ch1-2.txt")
PPL_CTX = 512


# ---------------------------------------------------------------------------------------------------------------
# Worker: runs under the llama-cpp-python venv. Imports only llama_cpp and numpy.

def worker(request_path: str, out_path: str) -> None:
    import ctypes

    import llama_cpp
    import numpy as np

    with open(request_path) as f:
        req = json.load(f)
    model = req["model"]
    out = {"llama_cpp_python": llama_cpp.__version__}

    if "tokenize" in req:
        vocab = llama_cpp.Llama(model_path=model, vocab_only=True, verbose=False)
        entries = []
        for item in req["tokenize"]:
            text = bytes.fromhex(item["hex"])
            ids = vocab.tokenize(text, add_bos=False, special=True)
            plain = vocab.tokenize(text, add_bos=False, special=False)
            entries.append({
                "ids": ids,
                "ids_plain": plain,
                "decoded_hex": vocab.detokenize(ids, special=True).hex(),
                "decoded_plain_hex": vocab.detokenize(plain, special=True).hex(),
            })
        out["tokenize"] = entries
        out["with_bos"] = [vocab.tokenize(t.encode(), add_bos=True, special=True) for t in req["with_bos"]]
        del vocab

    if "chat" in req:
        rendered = []
        for c in req["chat"]:
            msgs = (llama_cpp.llama_chat_message * len(c["messages"]))()
            keep = []
            for i, m in enumerate(c["messages"]):
                role, content = m["role"].encode(), m["content"].encode()
                keep += [role, content]
                msgs[i].role, msgs[i].content = role, content
            buf = ctypes.create_string_buffer(1 << 16)
            n = llama_cpp.llama_chat_apply_template(b"gemma", msgs, len(c["messages"]), c["add_generation_prompt"],
                                                    buf, len(buf))
            rendered.append(buf.raw[:n].decode() if n >= 0 else None)
        out["chat"] = rendered

    def load(n_ctx: int, kv_f32: bool):
        kw = dict(type_k=llama_cpp.GGML_TYPE_F32, type_v=llama_cpp.GGML_TYPE_F32) if kv_f32 else {}
        return llama_cpp.Llama(model_path=model, logits_all=True, n_ctx=n_ctx, n_batch=n_ctx, n_ubatch=n_ctx,
                               n_threads=N_THREADS, n_threads_batch=N_THREADS, flash_attn=False, verbose=False,
                               seed=0, **kw)

    if "greedy" in req:
        cases = []
        for g in req["greedy"]:
            result = {}
            for kv_f32 in (False, True):
                llm = load(512, kv_f32)
                prompt = llm.tokenize(g["text"].encode(), add_bos=not g["chat"], special=True)
                llm.eval(prompt)
                gen, margins, top2 = [], [], []
                for _ in range(req["n_gen"]):
                    row = np.asarray(llm.scores[llm.n_tokens - 1], dtype=np.float32)
                    tok = int(np.argmax(row))  # first maximum = lowest id on ties
                    order = np.argsort(-row, kind="stable")[:2]
                    gen.append(tok)
                    top2.append([int(order[0]), int(order[1])])
                    margins.append(float(row[order[0]] - row[order[1]]))
                    llm.eval([tok])
                text = llm.detokenize(gen, special=True).decode("utf-8", errors="replace")
                result["f32kv" if kv_f32 else "f16kv"] = {"prompt_ids": prompt, "generated_ids": gen,
                                                          "generated_text": text, "top2_ids": top2,
                                                          "top2_margin": margins}
                del llm
            cases.append(result)
        out["greedy"] = cases

    if "perplexity" in req:
        p = req["perplexity"]
        ctx = p["ctx"]
        vocab = llama_cpp.Llama(model_path=model, vocab_only=True, verbose=False)
        tokens = vocab.tokenize(p["text"].encode(), add_bos=True, special=False)
        bos = vocab.token_bos()
        del vocab
        n_chunks = len(tokens) // ctx
        out["perplexity"] = {"tokens": tokens, "n_chunks": n_chunks, "bos": bos}
        for kv_f32 in (False, True):
            llm = load(ctx, kv_f32)
            chunk_nll_llamacpp, chunk_nll_kvstash = [], []
            for c in range(n_chunks):
                chunk = list(tokens[c * ctx:(c + 1) * ctx])
                chunk[0] = bos  # llama-perplexity replaces each chunk's first token with BOS when add_bos
                llm.reset()
                llm.eval(chunk)
                logits = np.asarray(llm.scores[:ctx], dtype=np.float32).astype(np.float64)
                m = logits.max(axis=1, keepdims=True)
                lse = (m[:, 0] + np.log(np.exp(logits - m).sum(axis=1)))
                # nll[j] = -log p(chunk[j] | chunk[0..j-1]) for j = 1..ctx-1, from the logits at j-1.
                nll = np.array([lse[j - 1] - logits[j - 1, chunk[j]] for j in range(1, ctx)])
                first = ctx // 2
                chunk_nll_llamacpp.append(nll[first:].tolist())        # j = first+1 .. ctx-1 (ctx/2 - 1 tokens)
                chunk_nll_kvstash.append(nll[first - 1:].tolist())     # j = first .. ctx-1 (ctx/2 tokens)
            del llm
            suffix = "_f32kv" if kv_f32 else ""
            out["perplexity"]["chunk_nll_llamacpp" + suffix] = chunk_nll_llamacpp
            out["perplexity"]["chunk_nll_kvstash" + suffix] = chunk_nll_kvstash

    with open(out_path, "w") as f:
        json.dump(out, f)


# ---------------------------------------------------------------------------------------------------------------
# Main side: transformers' Jinja rendering, fixture layout.

def run_worker(python: str, request: dict) -> dict:
    with tempfile.TemporaryDirectory(prefix="make_gemma3_") as tmp:
        req_path, out_path = os.path.join(tmp, "req.json"), os.path.join(tmp, "out.json")
        with open(req_path, "w") as f:
            json.dump(request, f)
        subprocess.run([python, os.path.abspath(__file__), "--worker", req_path, out_path], check=True)
        with open(out_path) as f:
            return json.load(f)


def sha256_file(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--worker", nargs=2, metavar=("REQUEST", "OUT"), help=argparse.SUPPRESS)
    ap.add_argument("--llamacpp-python", default="/work/venv-bench/bin/python",
                    help="a Python with llama-cpp-python==0.3.36")
    ap.add_argument("--model", default=None, help=f"default $KVSTASH_MODELS_DIR or models/, file {MODEL_NAME}")
    ap.add_argument("--only", nargs="*", choices=["tokenizer", "chat", "greedy", "perplexity"])
    args = ap.parse_args()
    if args.worker:
        worker(*args.worker)
        return

    sys.path.insert(0, HERE)
    import refutil  # noqa: E402
    import tokenizer_corpus  # noqa: E402

    model = args.model or os.path.join(os.environ.get("KVSTASH_MODELS_DIR", os.path.join(REPO_ROOT, "models")),
                                       MODEL_NAME)
    sha = sha256_file(model)
    if sha != MODEL_SHA256:
        sys.exit(f"{model}: sha256 {sha} is not {MODEL_SHA256}; run scripts/fetch_model.sh gemma3")
    parts = set(args.only or ["tokenizer", "chat", "greedy", "perplexity"])
    common = {"generator": refutil.generator(__file__), "command": refutil.command_line(), "model": MODEL_NAME,
              "model_sha256": MODEL_SHA256}

    if "tokenizer" in parts:
        texts = [(t, False) for t in tokenizer_corpus.corpus_texts()]
        seen = {t for t, _ in texts}
        texts += [(t, True) for t in GEMMA_EXTRAS if t not in seen]
        malformed = list(tokenizer_corpus.MALFORMED)
        req = {"model": model, "with_bos": WITH_BOS,
               "tokenize": [{"hex": t.encode().hex()} for t, _ in texts] + [{"hex": b.hex()} for b in malformed]}
        res = run_worker(args.llamacpp_python, req)
        entries = []
        for (text, extra), r in zip(texts, res["tokenize"]):
            e = {"text": text, "ids": r["ids"]}
            if r["ids_plain"] != r["ids"]:
                e["ids_plain"] = r["ids_plain"]
            decoded = bytes.fromhex(r["decoded_hex"])
            if decoded != text.encode():
                e["decoded"] = decoded.decode("utf-8", errors="strict")
            if bytes.fromhex(r["decoded_plain_hex"]) != text.encode():
                e["decoded_plain"] = bytes.fromhex(r["decoded_plain_hex"]).decode("utf-8", errors="strict")
            if extra:
                e["extra"] = True
            entries.append(e)
        for b, r in zip(malformed, res["tokenize"][len(texts):]):
            entries.append({"hex": b.hex(), "ids": r["ids"], "decoded_hex": r["decoded_hex"]})
        refutil.write_json(os.path.join(OUT_DIR, "tokenizer_corpus.json"), {
            **common,
            "versions": {"llama_cpp_python": res["llama_cpp_python"]},
            "method": ("llama_cpp.Llama(model, vocab_only=True): tokenize(text.encode(), add_bos=False, special=True) "
                       "-> ids; special=False -> ids_plain (only where different); detokenize(ids, special=True) -> "
                       "decoded (only where it is not the text; decoded_plain likewise for ids_plain). Malformed "
                       "UTF-8 (hex): ids and decoded_hex. with_bos: tokenize(text, add_bos=True, special=True)."),
            "n_entries": len(entries),
            "with_bos": [{"text": t, "ids": ids} for t, ids in zip(WITH_BOS, res["with_bos"])],
            "entries": entries,
        })
        print(f"tokenizer: {len(entries)} entries", file=sys.stderr)

    if "chat" in parts:
        from transformers.utils.chat_template_utils import render_jinja_template
        import transformers

        def render(messages, gen):
            return render_jinja_template([messages], chat_template=TEMPLATE, add_generation_prompt=gen,
                                         bos_token="<bos>", eos_token="<eos>")[0][0]

        cases = [{"messages": m, "add_generation_prompt": g} for m in CONVERSATIONS for g in (True, False)]
        res = run_worker(args.llamacpp_python, {"model": model, "chat": cases})
        for c, builtin in zip(cases, res["chat"]):
            c["rendered"] = render(c["messages"], c["add_generation_prompt"])
            c["llamacpp_builtin_agrees"] = builtin is not None and "<bos>" + builtin == c["rendered"]
        refused = []
        for m in REFUSED:
            try:
                render(m, True)
                raise AssertionError(f"template did not refuse {m}")
            except Exception as exc:  # jinja2 TemplateError from raise_exception
                refused.append({"messages": m, "error": str(exc)})
        refutil.write_json(os.path.join(OUT_DIR, "chat.json"), {
            **common,
            "versions": {"transformers": transformers.__version__, "llama_cpp_python": res["llama_cpp_python"]},
            "template_source": TEMPLATE_SOURCE,
            "method": ("transformers.utils.chat_template_utils.render_jinja_template([messages], chat_template="
                       "template, add_generation_prompt=..., bos_token='<bos>', eos_token='<eos>'); "
                       "llamacpp_builtin_agrees: '<bos>' + llama.cpp's llama_chat_apply_template('gemma', ...) is "
                       "the same text (llama.cpp trims the system message and has no role check)."),
            "expected_detection": {"name": "gemma", "default_system": None},
            "template": TEMPLATE,
            "cases": cases,
            "refused": refused,
        })
        print(f"chat: {len(cases)} cases, llama.cpp built-in agrees on "
              f"{sum(c['llamacpp_builtin_agrees'] for c in cases)}", file=sys.stderr)

    if "greedy" in parts:
        req = {"model": model, "n_gen": N_GEN,
               "greedy": [{"name": n, "text": t, "chat": c} for n, t, c in GREEDY_PROMPTS]}
        res = run_worker(args.llamacpp_python, req)
        out_cases = []
        for (name, text, chat), r in zip(GREEDY_PROMPTS, res["greedy"]):
            a, b = r["f16kv"], r["f32kv"]
            out_cases.append({"name": name, "prompt": text, "chat_formatted": chat, "prompt_ids": a["prompt_ids"],
                              "generated_ids": a["generated_ids"], "generated_text": a["generated_text"],
                              "top2_ids": a["top2_ids"], "top2_margin": [refutil.f32(x) for x in a["top2_margin"]],
                              "f32_kv_generated_ids": b["generated_ids"],
                              "f32_kv_agrees": a["generated_ids"] == b["generated_ids"]})
        refutil.write_json(os.path.join(OUT_DIR, "greedy.json"), {
            **common,
            "versions": {"llama_cpp_python": res["llama_cpp_python"]},
            "method": (f"llama_cpp.Llama(model, n_ctx=512, n_batch=512, n_threads={N_THREADS}, flash_attn=False, "
                       "logits_all=True), default F16 KV cache. prompt_ids = tokenize(prompt, add_bos=not "
                       "chat_formatted, special=True) (chat-formatted prompts hold '<bos>' as text); eval(prompt_ids) "
                       "in one batch, then {n} times: argmax of the last logits row (lowest id on ties), eval that "
                       "token alone. EOS/<end_of_turn> do not stop it. top2_margin[k]: largest minus second-largest "
                       "logit at step k. f32_kv_generated_ids: the same with type_k=type_v=F32.").format(n=N_GEN),
            "n_gen": N_GEN,
            "cases": out_cases,
        })
        print("greedy: " + ", ".join(f"{c['name']} min margin {min(c['top2_margin']):.3f} f32kv "
                                     f"{'=' if c['f32_kv_agrees'] else '!='}" for c in out_cases), file=sys.stderr)

    if "perplexity" in parts:
        import math

        with open(os.path.join(REPO_ROOT, PPL_TEXT), encoding="utf-8") as f:
            text = f.read()
        res = run_worker(args.llamacpp_python, {"model": model, "perplexity": {"text": text, "ctx": PPL_CTX}})
        p = res["perplexity"]

        def summary(chunks):
            flat = [x for c in chunks for x in c]
            mean = sum(flat) / len(flat)
            return {"n_scored": len(flat), "mean_nll": mean, "ppl": math.exp(mean),
                    "chunk_mean_nll": [sum(c) / len(c) for c in chunks]}

        refutil.write_json(os.path.join(OUT_DIR, "perplexity.json"), {
            **common,
            "versions": {"llama_cpp_python": res["llama_cpp_python"]},
            "text_file": PPL_TEXT,
            "text_sha256": hashlib.sha256(text.encode()).hexdigest(),
            "ctx": PPL_CTX,
            "method": (
                f"What llama.cpp's llama-perplexity computes (its tools/perplexity/perplexity.cpp, not in the sdist, "
                f"re-done here with llama-cpp-python so every number is visible): tokens = tokenize(text, "
                f"add_bos=True, special=False) (Gemma's add_bos_token is true); n_chunks = len(tokens) // ctx "
                f"(a final partial chunk dropped); chunk c = tokens[c*ctx:(c+1)*ctx] with its first token replaced "
                f"by BOS ({p['bos']}); each chunk evaluated alone from an empty cache, one batch of ctx tokens "
                f"(n_ctx=n_batch=n_ubatch={PPL_CTX}, {N_THREADS} threads, F16 KV cache, flash_attn off, "
                f"logits_all). NLL_j = logsumexp(logits[j-1]) - logits[j-1][chunk[j]] in float64 from the float32 "
                f"logits. 'llamacpp': j = ctx/2+1 .. ctx-1 ({PPL_CTX // 2 - 1} per chunk), llama-perplexity's "
                f"scoring (first = n_ctx/2; it scores the n_ctx-1-first tokens after first). 'kvstash': j = ctx/2 .. "
                f"ctx-1 ({PPL_CTX // 2} per chunk), `kvstash perplexity`'s convention (tests/fixtures/smollm2/"
                f"perplexity.json), from the same logits. ppl = exp(mean NLL over all scored tokens). 'f32_kv': "
                f"both again with type_k = type_v = F32."),
            "n_tokens": len(p["tokens"]),
            "n_chunks": p["n_chunks"],
            "llamacpp": summary(p["chunk_nll_llamacpp"]),
            "kvstash": summary(p["chunk_nll_kvstash"]),
            "f32_kv": {"llamacpp": summary(p["chunk_nll_llamacpp_f32kv"]),
                       "kvstash": summary(p["chunk_nll_kvstash_f32kv"])},
            "tokens": p["tokens"],
        })
        print(f"perplexity: {p['n_chunks']} chunks, llama.cpp ppl {summary(p['chunk_nll_llamacpp'])['ppl']:.4f}, "
              f"kvstash convention {summary(p['chunk_nll_kvstash'])['ppl']:.4f}; F32 KV "
              f"{summary(p['chunk_nll_llamacpp_f32kv'])['ppl']:.4f} / {summary(p['chunk_nll_kvstash_f32kv'])['ppl']:.4f}",
              file=sys.stderr)


if __name__ == "__main__":
    main()
