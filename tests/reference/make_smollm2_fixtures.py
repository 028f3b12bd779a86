#!/usr/bin/env python3
"""SmolLM2-135M-Instruct (Q4_1 GGUF) reference fixtures for kvstash's parity tests (tests/fixtures/smollm2/).

  logits.json            per-position summary of the logits of ~300 tokens of varied text, one forward pass
  greedy.json            5 plain-text prompts, 40 greedy tokens each, with the top-2 logit margin per step
  perplexity.json        the reference perplexity of tests/fixtures/text/persuasion_ch1-2.txt
  tokenizer_corpus.json  ~200 strings and their token ids

Model: transformers loads the GGUF itself --
  AutoModelForCausalLM.from_pretrained(models/, gguf_file=SmolLM2-135M-Instruct.Q4_1.gguf,
                                       dtype=torch.float32, attn_implementation="eager")
which dequantizes every tensor to fp32 with gguf-py and un-permutes attn_q/attn_k; token_embd (Q8_0) is
also the output matrix (tied). Every forward pass is a single call over the whole sequence with
use_cache=False, in fp32.

Tokenizer: transformers builds one from the GGUF (AutoTokenizer.from_pretrained(..., gguf_file=...)), but
it does not know llama.cpp's "smollm" pre-tokenizer and falls back to the plain GPT-2 ByteLevel split,
which -- unlike SmolLM2's own tokenizer.json and llama.cpp -- does not isolate digits first. The two
differ when whitespace precedes a digit ("a  1": GPT-2 split gives [a][Ġ][Ġ1] -> a,Ġ,Ġ,1; SmolLM2 gives
[a][ĠĠ][1] -> a,ĠĠ,1). This script therefore uses that tokenizer with its pre-tokenizer replaced by
SmolLM2's: Sequence[Digits(individual_digits=True), ByteLevel(add_prefix_space=False, use_regex=True)]
(= llama.cpp's smollm regexes "\\p{N}" then the GPT-2 pattern). Vocabulary, merges and special tokens
are the GGUF's. tokenizer_corpus.json records the unpatched transformers ids too, where they differ.
No BOS is added anywhere (tokenizer.ggml.add_bos_token = false).

Run: /path/to/venv/bin/python tests/reference/make_smollm2_fixtures.py [--model PATH] [--only NAME ...]
(a few minutes on 2 cores).
"""
import argparse
import hashlib
import math
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import refutil  # noqa: E402  (sets HF_HUB_OFFLINE before transformers is imported)

import torch  # noqa: E402

OUT_DIR = os.path.join(refutil.FIXTURES, "smollm2")
TEXT_FILE = os.path.join(refutil.FIXTURES, "text", "persuasion_ch1-2.txt")
DEFAULT_MODEL = os.path.join(refutil.REPO_ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")

TOP_K = 64
N_PROBE = 128
PROBE_SEED = 20240611
N_GREEDY = 40
PPL_CTX = 256

TOKENIZER_METHOD = (
    "AutoTokenizer.from_pretrained(dir, gguf_file=model) with backend_tokenizer.pre_tokenizer replaced by "
    "Sequence[Digits(individual_digits=True), ByteLevel(add_prefix_space=False, trim_offsets=True, "
    "use_regex=True)] (SmolLM2's tokenizer.json / llama.cpp pre-tokenizer 'smollm'; transformers' GGUF "
    "converter does not know 'smollm' and would use the plain GPT-2 split). "
    "ids = tok(text, add_special_tokens=False).input_ids (no BOS: add_bos_token is false)."
)

LOGITS_TEXT = (
    "The old lighthouse keeper climbed the spiral stairs every evening at dusk. He had done so for "
    "thirty-one years, and in all that time the great lamp had never once failed to shine across the bay.\n\n"
    "def fibonacci(n: int) -> list[int]:\n"
    "    seq = [0, 1]\n"
    "    while len(seq) < n:\n"
    "        seq.append(seq[-1] + seq[-2])\n"
    "    return seq[:n]\n\n"
    "Shopping list:\n"
    "- 2 kg of apples\n"
    "- 500 g of flour\n"
    "- 12 eggs\n"
    "- 1.5 L of milk\n\n"
    "In 1969, Apollo 11 landed on the Moon; the mission lasted 8 days, 3 hours and 18 minutes. "
    "Pi is roughly 3.14159, and 2^10 = 1024.\n\n"
    "Le petit chat dort sur le canapé. Der schnelle braune Fuchs springt über den faulen Hund. "
    "¿Dónde está la biblioteca? Москва — столица России.\n\n"
    "Q: What is the boiling point of water at sea level?\n"
    "A: 100 °C (212 °F).\n"
)

GREEDY_PROMPTS = [
    ("plain", "The capital of France is"),
    ("code", 'def is_prime(n):\n    """Return True if n is a prime number."""\n'),
    ("list", "Here is a list of the planets in our solar system:\n1. Mercury\n2."),
    ("question", "Question: Why is the sky blue?\nAnswer:"),
    ("story", "Once upon a time, in a small village at the edge of a dark forest,"),
]


# --------------------------------------------------------------------------------------------------


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def load_tokenizers(model_path):
    from tokenizers import pre_tokenizers
    from transformers import AutoTokenizer

    d, f = os.path.dirname(model_path), os.path.basename(model_path)
    raw = AutoTokenizer.from_pretrained(d, gguf_file=f)
    tok = AutoTokenizer.from_pretrained(d, gguf_file=f)
    tok.backend_tokenizer.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True),
    ])
    # What we expect of the GGUF's tokenizer: byte-level BPE, 49152 tokens, 17 control tokens at 0..16.
    assert len(tok) == 49152, len(tok)
    assert tok.convert_ids_to_tokens([0, 1, 2]) == ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    assert encode(tok, "a  1") == [81, 256, 33] and encode(raw, "a  1") == [81, 216, 216, 33]
    assert encode(tok, "Hello world") == [19556, 905]
    assert encode(tok, "The year 2024") == [504, 713, 216, 34, 32, 34, 36]  # digits isolated, 'Ġ' alone
    return tok, raw


def encode(tok, text, split_special=False):
    return list(tok(text, add_special_tokens=False, split_special_tokens=split_special)["input_ids"])


def load_model(model_path):
    from transformers import AutoModelForCausalLM

    d, f = os.path.dirname(model_path), os.path.basename(model_path)
    model = AutoModelForCausalLM.from_pretrained(d, gguf_file=f, dtype=torch.float32, attn_implementation="eager")
    model.eval()
    c = model.config
    assert (c.num_hidden_layers, c.hidden_size, c.num_attention_heads, c.num_key_value_heads, c.vocab_size) == (
        30, 576, 9, 3, 49152)
    assert c.tie_word_embeddings and model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()
    assert all(isinstance(m, torch.nn.Linear) for n, m in model.named_modules() if n.endswith("_proj"))
    return model


@torch.no_grad()
def forward_logits(model, ids):
    out = model(input_ids=torch.tensor([ids], dtype=torch.long), use_cache=False)
    return out.logits[0].float()


def common(model_path, script=__file__):
    return {
        "model": os.path.basename(model_path),
        "model_sha256": sha256(model_path),
        "generator": refutil.generator(script),
        "versions": refutil.versions(),
        "model_loading": ("AutoModelForCausalLM.from_pretrained(dir, gguf_file=model, dtype=torch.float32, "
                          "attn_implementation='eager'); model.eval(); forward passes with use_cache=False "
                          "over the whole sequence (positions 0..n-1); no BOS added"),
        "tokenizer": TOKENIZER_METHOD,
    }


# --------------------------------------------------------------------------------------------------


def cross_check_logits(model_path, ids, ref):
    """Second opinion on transformers' GGUF loading: the hand-built loader of make_tiny_models.py (config from
    the GGUF metadata, gguf-py dequantization, this project's Q/K un-permute), plus transformers' separate
    torch dequantizer on every block-quantized tensor."""
    import gguf
    import make_tiny_models as tiny

    md = gguf.GGUFReader(model_path).fields
    val = lambda k: md[k].contents()  # noqa: E731
    v = dict(vocab=int(val("llama.vocab_size")), dim=int(val("llama.embedding_length")),
             ffn=int(val("llama.feed_forward_length")), n_layer=int(val("llama.block_count")),
             n_head=int(val("llama.attention.head_count")), n_head_kv=int(val("llama.attention.head_count_kv")),
             head_dim=int(val("llama.rope.dimension_count")), eps=float(val("llama.attention.layer_norm_rms_epsilon")),
             ctx=int(val("llama.context_length")), rope_base=float(val("llama.rope.freq_base")), tied=True)
    manual = tiny.hf_model_manual(v, model_path)
    diff = float((forward_logits(manual, ids) - ref).abs().max())
    del manual
    deq = tiny.second_dequant_diff(model_path)
    assert diff < 1e-3 and deq < 1e-6, (diff, deq)
    return {"manual_loader_max_abs_diff": refutil.f32(diff), "second_dequantizer_max_abs_diff": refutil.f32(deq)}


def make_logits(model, tok, model_path, raw=None):
    ids = encode(tok, LOGITS_TEXT)
    assert tok.decode(ids) == LOGITS_TEXT
    logits = forward_logits(model, ids)  # [n, vocab] fp32
    n, vocab = logits.shape
    probe = sorted(int(x) for x in np.random.default_rng(PROBE_SEED).choice(vocab, N_PROBE, replace=False))
    lse = torch.logsumexp(logits.double(), dim=-1)
    positions = []
    for i in range(n):
        row = logits[i]
        # top-k by logit, descending; ties by ascending id (stable sort on -logit)
        order = np.argsort(-row.numpy(), kind="stable")[:TOP_K]
        positions.append({
            "lse": refutil.f32(lse[i].item()),
            "argmax": int(order[0]),
            "top_ids": [int(j) for j in order],
            "top_logits": refutil.f32_list(row.numpy()[order]),
            "probe_logits": refutil.f32_list(row.numpy()[probe]),
        })
    cross = cross_check_logits(model_path, ids, logits)
    out = common(model_path)
    out.update({
        "cross_check": cross,
        "description": "Logits of one forward pass over ~300 tokens of varied text, stored per position as a "
                       "summary because the full [n x 49152] matrix is too big to commit.",
        "format": {
            "tokens": "the input token ids (no BOS); logits row i is the prediction after tokens[0..i]",
            "probe_ids": f"{N_PROBE} distinct vocab ids (numpy default_rng({PROBE_SEED}).choice(49152, {N_PROBE}, "
                         "replace=False), sorted), shared by all positions",
            "positions[i].lse": "logsumexp over the full vocabulary of the fp32 logits at position i (computed in "
                                "float64, stored as float32)",
            "positions[i].argmax": "id of the largest logit (lowest id on ties)",
            "positions[i].top_ids/top_logits": f"the {TOP_K} largest logits, descending (ties: lower id first)",
            "positions[i].probe_logits": "logits at probe_ids, same order",
            "intended_checks": "max |logit diff| over all stored logits (top_logits and probe_logits); KL(ref || "
                               "test) over the top-64 ids plus one lumped 'rest' bucket (p_rest = 1 - sum of top-64 "
                               "probabilities, probabilities from exp(logit - lse)); top-1 (argmax) agreement",
        },
        "text": LOGITS_TEXT,
        "n_tokens": n,
        "tokens_same_with_unpatched_transformers_tokenizer": raw is not None and encode(raw, LOGITS_TEXT) == ids,
        "tokens": ids,
        "probe_ids": probe,
        "positions": positions,
    })
    refutil.write_json(os.path.join(OUT_DIR, "logits.json"), out)
    print(f"logits.json: {n} tokens", flush=True)


@torch.no_grad()
def make_greedy(model, tok, model_path):
    cases = []
    for name, prompt in GREEDY_PROMPTS:
        ids = encode(tok, prompt)
        seq = list(ids)
        gen, margins, top2 = [], [], []
        for _ in range(N_GREEDY):
            row = forward_logits(model, seq)[-1]
            vals, idx = torch.topk(row, 2)
            nxt = int(torch.argmax(row))
            assert nxt == int(idx[0]) or row[nxt] == vals[0]
            gen.append(nxt)
            margins.append(refutil.f32((vals[0] - vals[1]).item()))
            top2.append([int(idx[0]), int(idx[1])])
            seq.append(nxt)
        # second opinion: transformers' generate() with its KV cache, stopped only by length
        g = model.generate(torch.tensor([ids]), do_sample=False, max_new_tokens=N_GREEDY, min_new_tokens=0,
                           eos_token_id=None, pad_token_id=2, num_beams=1, temperature=None, top_p=None,
                           top_k=None)[0, len(ids):].tolist()
        agree = 0
        while agree < min(len(g), len(gen)) and g[agree] == gen[agree]:
            agree += 1
        cases.append({
            "name": name,
            "prompt": prompt,
            "prompt_ids": ids,
            "generated_ids": gen,
            "generated_text": tok.decode(gen),
            "top2_margin": margins,
            "top2_ids": top2,
            "generate_with_cache_agrees_for": agree,
        })
        print(f"greedy {name}: {tok.decode(gen)!r} min margin {min(margins):.4f} generate() agrees {agree}/40",
              flush=True)
    out = common(model_path)
    out.update({
        "description": f"Greedy continuations: {N_GREEDY} new tokens per plain-text prompt (no chat template, no BOS).",
        "method": ("Manual argmax loop without a KV cache: at each step one full forward pass over prompt + tokens "
                   "generated so far (use_cache=False), next = argmax of the last position's fp32 logits (lowest id "
                   "on ties). EOS does not stop generation: always exactly 40 tokens. top2_margin[k] = largest minus "
                   "second-largest logit at step k (small margins mark genuine near-ties where an engine may "
                   "legitimately diverge); top2_ids[k] = those two ids. generate_with_cache_agrees_for = length of the "
                   "common prefix with model.generate(do_sample=False, max_new_tokens=40, eos_token_id=None), which "
                   "uses transformers' KV cache, as a second opinion."),
        "n_generate": N_GREEDY,
        "cases": cases,
    })
    refutil.write_json(os.path.join(OUT_DIR, "greedy.json"), out)


@torch.no_grad()
def make_perplexity(model, tok, model_path, raw=None):
    with open(TEXT_FILE, encoding="utf-8") as f:
        text = f.read()
    ids = encode(tok, text)
    assert tok.decode(ids) == text
    n_chunks = len(ids) // PPL_CTX
    first = PPL_CTX // 2
    nll_sum, n_scored, chunk_nll = 0.0, 0, []
    t0 = time.time()
    for c in range(n_chunks):
        chunk = ids[c * PPL_CTX:(c + 1) * PPL_CTX]
        logp = torch.log_softmax(forward_logits(model, chunk).double(), dim=-1)
        targets = torch.tensor(chunk[first:])
        nll = -logp[first - 1:PPL_CTX - 1].gather(1, targets[:, None])[:, 0]
        chunk_nll.append(float(nll.mean()))
        nll_sum += float(nll.sum())
        n_scored += len(targets)
    mean_nll = nll_sum / n_scored
    ppl = math.exp(mean_nll)
    out = common(model_path)
    out.update({
        "description": "Reference perplexity for `kvstash perplexity`.",
        "text_file": refutil.rel(TEXT_FILE),
        "text_sha256": sha256(TEXT_FILE),
        "ctx": PPL_CTX,
        "first": first,
        "method": (f"tokens = tokenizer(text) with no BOS (add_bos is false for this model) -- the whole file, "
                   f"including its final newline. Split into consecutive non-overlapping chunks of ctx = {PPL_CTX} "
                   "tokens, dropping a final partial chunk. Each chunk is evaluated independently from an empty "
                   "cache (one fp32 forward pass over the chunk, positions 0..ctx-1). In each chunk, score the "
                   f"tokens at positions j = first..ctx-1 with first = ctx/2 = {first}: token j is predicted from the "
                   "logits at position j-1, NLL_j = logsumexp(logits[j-1]) - logits[j-1][token_j] (natural log, "
                   "computed in float64 from the fp32 logits). mean_nll = mean of NLL_j over all scored tokens of "
                   "all chunks; ppl = exp(mean_nll)."),
        "n_tokens": len(ids),
        "tokens_same_with_unpatched_transformers_tokenizer": raw is not None and encode(raw, text) == ids,
        "n_chunks": n_chunks,
        "n_scored": n_scored,
        "mean_nll": mean_nll,
        "ppl": ppl,
        "chunk_mean_nll": chunk_nll,
        "tokens": ids,
    })
    refutil.write_json(os.path.join(OUT_DIR, "perplexity.json"), out)
    print(f"perplexity.json: {len(ids)} tokens, {n_chunks} chunks, {n_scored} scored, mean nll {mean_nll:.6f}, "
          f"ppl {ppl:.4f} ({time.time() - t0:.1f}s)", flush=True)


def tokenizer_strings():
    import random

    s = [
        "", " ", "  ", "   ", "\t", "\n", "\n\n", "\r\n", " \n ", "\t\t\tx", "a", "A", ".", "Hello", "Hello world",
        " Hello world", "Hello  world", "Hello world ", "hello\nworld", "HELLO WORLD", "hElLo WoRlD",
        "The quick brown fox jumps over the lazy dog.",
        "It is a truth universally acknowledged, that a single man in possession of a good fortune, must be in want of a wife.",
        "don't", "Don't you dare!", "I'm", "you're", "we've", "they'll", "she'd", "it's", "IT'S", "rock'n'roll",
        "'s", "'t", "''", "\"quoted\"", "'single'", "the dog's bone", "O'Brien",
        "0", "1", "12", "123", "1234", "12345", "3.14159", "-42", "+7", "1,000,000", "1 000 000", "2024-01-15",
        "12:34:56", "1e-5", "6.022e23", "0x1F", "0b1011", "v1.2.3", "$100", "€50", "£3.50", "100%", "50 %",
        "a1", "a 1", "a  1", "a   1", "x\t1", "x\n1", "x\n 1", "  2", "\n 5", "1 2 3 4 5", "1  2   3",
        "abc123def", "IPv4 192.168.0.1", "phone: +1 (555) 123-4567", "ISBN 978-3-16-148410-0",
        "Le petit chat dort sur le canapé.", "Où est la bibliothèque ?", "Ça va très bien, merci !",
        "Der schnelle braune Fuchs springt über den faulen Hund.", "Grüße aus München", "Straße",
        "¿Dónde está la biblioteca?", "¡Olé!", "mañana", "Português: coração, ação",
        "Москва — столица России.", "Привет, мир!", "Ελληνικά: Καλημέρα κόσμε", "Україна",
        "中文：你好，世界！", "我爱自然语言处理。", "日本語のテキストです。", "カタカナ ひらがな 漢字",
        "한국어 문장입니다.", "안녕하세요", "العربية: مرحبا بالعالم", "עברית: שלום עולם", "हिन्दी: नमस्ते दुनिया",
        "ภาษาไทย สวัสดี", "Tiếng Việt: Xin chào thế giới", "Türkçe: İstanbul ığdır", "ქართული", "Հայերեն",
        "😀", "😀😃😄", "hi 👋 there", "👍🏽", "👨‍👩‍👧‍👦", "🇫🇷🇯🇵", "❤️", "★☆✓✗", "→ ← ↑ ↓", "∑ ∫ √ ∞ ≠ ≤ ≥",
        "x² + y² = z²", "H₂O", "½ ¼ ¾", "Ⅻ", "①②③", "٣٤٥", "१२३", "１２３ ＡＢＣ",
        "e\u0301", "\u00e9", "caf\u00e9 vs cafe\u0301", "a\u200bb", "\ufeffBOM", "soft\u00adhyphen", "nbsp\u00a0here",
        "tab\there", "line1\nline2\nline3", "trailing spaces   ", "   leading spaces", "mixed \t \n whitespace",
        "\n\n\n\n", "          ", "\t \t \t", " \n\n \n", "a\r\nb\r\nc", "end\n",
        "def foo(x):\n    return x * 2\n", "for (int i = 0; i < n; ++i) {\n\tsum += a[i];\n}",
        "#include <stdio.h>\nint main(void) { printf(\"hi\\n\"); return 0; }",
        "const f = (a, b) => a ?? b;", "SELECT * FROM users WHERE id = 42;", "if x == 1 and y != 2: pass",
        "{\"key\": [1, 2, 3], \"nested\": {\"a\": null}}", "<html><body><p class=\"x\">Hi</p></body></html>",
        "https://example.com/path?query=1&b=two#frag", "user.name+tag@example.org", "C:\\Windows\\System32",
        "/usr/local/bin/python3", "snake_case_name", "camelCaseName", "PascalCaseName", "kebab-case-name",
        "SCREAMING_SNAKE", "__init__", "a->b", "a::b", "x+=1", "i++", "!==", "<=>", "...", "…", "--", "—", "___",
        "!!!!!!!!", "????", "*****", "=====", "#####", "~~~~", "((()))", "[[]]", "{{}}", "<<>>",
        "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", "abababababababababab", "the the the the the",
        "Supercalifragilisticexpialidocious", "pneumonoultramicroscopicsilicovolcanoconiosis",
        "<|endoftext|>", "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n",
        "text <|im_end|> more text", "<|im_start", "|im_end|>", "<repo_name>kvstash",
        "\x00", "nul\x00byte", "\x07bell", "\x1b[31mred\x1b[0m", "\x7f",
    ]
    rng = random.Random(12345)
    pools = [
        "abcdefghijklmnopqrstuvwxyz", "ABCDEFGHIJKLMNOPQRSTUVWXYZ", "0123456789", "     ", "\n\t", ".,;:!?'\"-()[]{}",
        "éèêàçüößñ", "абвгдежзий", "你好世界中文字", "😀👍🔥✨", "αβγδε",
    ]
    while len(s) < 195:
        n = rng.randint(1, 40)
        s.append("".join(rng.choice(rng.choice(pools)) for _ in range(n)))
    long = (
        "Chapter 1\n\nThe history of computing is long and winding. " * 40
        + "0123456789 " * 50 + "\n\n" + "def f(x):\n    return x\n" * 30 + "Ünïcödé ✓ 😀 中文 " * 30
    )
    s.append(long)
    s.append(" ".join(str(i) for i in range(500)))
    s.append("word " * 1000)
    s.append("\n".join(["    indented line with trailing spaces   "] * 50))
    s.append("x" * 3000)
    return s


def make_tokenizer_corpus(tok, raw, model_path):
    entries = []
    n_diff = 0
    specials = tok.convert_ids_to_tokens(list(range(17)))  # the GGUF's 17 control tokens
    for text in tokenizer_strings():
        ids = encode(tok, text)
        e = {"text": text, "ids": ids}
        if tok.decode(ids) != text:
            e["decode_differs"] = True
        if any(sp in text for sp in specials):
            e["contains_special"] = True
            e["ids_no_special"] = encode(tok, text, split_special=True)
        r = encode(raw, text)
        if r != ids:
            e["transformers_gguf_unpatched_ids"] = r
            n_diff += 1
        entries.append(e)
    out = {
        "model": os.path.basename(model_path),
        "model_sha256": sha256(model_path),
        "generator": refutil.generator(__file__),
        "versions": refutil.versions(),
        "tokenizer": TOKENIZER_METHOD,
        "format": {
            "entries[].text": "the input string (any Unicode, may be empty, may contain control characters)",
            "entries[].ids": "token ids, no BOS/EOS added. The 17 control tokens (<|endoftext|>, <|im_start|>, "
                             "<|im_end|>, <repo_name>, ...) ARE matched as single tokens when their exact text "
                             "appears (HF behaviour; llama.cpp's parse_special=true)",
            "entries[].contains_special": "present (true) when the text contains a control token's text",
            "entries[].ids_no_special": "for those entries: ids with control-token text treated as plain text "
                                        "(HF split_special_tokens=True; llama.cpp parse_special=false)",
            "entries[].transformers_gguf_unpatched_ids": "present only where transformers' own GGUF tokenizer "
                                                         "(plain GPT-2 pre-tokenizer, no digit isolation) gives "
                                                         "different ids; informative, NOT the reference",
            "entries[].decode_differs": "present (true) when decode(ids) != text (should not happen)",
        },
        "n_entries": len(entries),
        "n_differ_from_unpatched_transformers": n_diff,
        "entries": entries,
    }
    refutil.write_json(os.path.join(OUT_DIR, "tokenizer_corpus.json"), out)
    print(f"tokenizer_corpus.json: {len(entries)} strings, {n_diff} differ from unpatched transformers", flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=os.environ.get("KVSTASH_MODEL", DEFAULT_MODEL))
    ap.add_argument("--only", nargs="*", choices=["tokenizer", "logits", "greedy", "perplexity"])
    args = ap.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(max(1, os.cpu_count() or 1))
    os.makedirs(OUT_DIR, exist_ok=True)
    only = set(args.only or ["tokenizer", "logits", "greedy", "perplexity"])
    tok, raw = load_tokenizers(args.model)
    if "tokenizer" in only:
        make_tokenizer_corpus(tok, raw, args.model)
    if only & {"logits", "greedy", "perplexity"}:
        model = load_model(args.model)
        if "logits" in only:
            make_logits(model, tok, args.model, raw)
        if "greedy" in only:
            make_greedy(model, tok, args.model)
        if "perplexity" in only:
            make_perplexity(model, tok, args.model, raw)


if __name__ == "__main__":
    main()
