#!/usr/bin/env python3
"""Writes tests/fixtures/tokenizer/smollm2_corpus.json: Hugging Face token ids for a corpus of strings,
the oracle for tests/parity/tokenizer_parity_test.cpp.

    HF_HUB_OFFLINE=1 /work/venv-ref/bin/python tests/reference/make_tokenizer_corpus.py

The strings come from tokenizer_corpus.py (shared with make_vocab_corpora.py).

Oracles, per string:
  ids           transformers AutoTokenizer.from_pretrained(models/, gguf_file=SmolLM2...gguf), i.e. the
                tokenizer transformers builds from the GGUF's own tokenizer.ggml.* metadata;
                encode(text, add_special_tokens=False) (special tokens in the text are parsed).
  ids_plain     the same with split_special_tokens=True (special-token text tokenized as text), only
                where it differs from `ids`.
  ids_tokenizer_json, ids_plain_tokenizer_json
                only where they differ from `ids` / `ids_plain`: the pipeline SmolLM2's own tokenizer.json declares
                (pre_tokenizer Sequence[Digits(individual_digits=true), ByteLevel(add_prefix_space=false)],
                the GGUF's vocabulary and merges), built with `tokenizers` directly. transformers'
                GGUF loader has no Digits step for pre "smollm"; llama.cpp has one. This is the
                tokenization the model was trained with, so kvstash follows it (a space run before a
                digit: "x  =  1" is [x, Ġ, Ġ=, ĠĠ, 1] here but [x, Ġ, Ġ=, Ġ, Ġ, 1] in transformers).
  splits        byte offsets where HF `tokenizers` Split(Regex(pattern), "isolated") ends each piece,
                for the Llama 3, Qwen2 and GPT-2 patterns, to test the pre-tokenizer regexes without those
                vocabularies.
  unassigned    present (with Python's Unicode version) when the text holds a code point unassigned
                there; kvstash's PCRE2 (10.42: Unicode 14) and HF's Oniguruma may classify it differently.
  hex           for malformed UTF-8 (not representable in JSON): the bytes in hex, and no HF ids; the
                test checks only that encoding does not fail and that decoding gives the bytes back.
"""

import hashlib
import json
import os
import platform
import sys
import unicodedata

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import gguf  # noqa: E402
import tokenizers  # noqa: E402
import transformers  # noqa: E402
from tokenizers import AddedToken, Regex, Tokenizer, models, pre_tokenizers  # noqa: E402
from transformers import AutoTokenizer  # noqa: E402

from tokenizer_corpus import MALFORMED, corpus_texts  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODEL_DIR = os.path.join(ROOT, "models")
MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
OUT = os.path.join(ROOT, "tests", "fixtures", "tokenizer", "smollm2_corpus.json")

SPLIT_PATTERNS = {
    "llama-bpe": r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
    "qwen2": r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
    "gpt2": r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+",
}


def byte_level_tokenizer_json_pipeline(hf):
    """SmolLM2's tokenizer.json pipeline, from the same vocabulary and merges as `hf`."""
    backend = json.loads(hf.backend_tokenizer.to_str())
    model = backend["model"]
    merges = [tuple(m.split(" ", 1)) if isinstance(m, str) else tuple(m) for m in model["merges"]]
    tok = Tokenizer(models.BPE(vocab=model["vocab"], merges=merges, ignore_merges=False))
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Digits(individual_digits=True),
         pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])
    tok.add_special_tokens([AddedToken(t["content"], normalized=False, special=True)
                            for t in backend["added_tokens"]])
    return tok


def split_ends(pre, text):
    ends, pos = [], 0
    for piece, _ in pre.pre_tokenize_str(text):
        pos += len(piece.encode("utf-8"))
        ends.append(pos)
    return ends


def main():
    hf = AutoTokenizer.from_pretrained(MODEL_DIR, gguf_file=MODEL_FILE)
    reference = byte_level_tokenizer_json_pipeline(hf)
    splitters = {name: pre_tokenizers.Split(Regex(p), behavior="isolated") for name, p in SPLIT_PATTERNS.items()}

    entries, disagreements = [], 0
    for text in corpus_texts():
        ids = hf.encode(text, add_special_tokens=False)
        entry = {"text": text, "ids": ids}
        plain = hf.encode(text, add_special_tokens=False, split_special_tokens=True)
        if plain != ids:
            entry["ids_plain"] = plain
        reference.encode_special_tokens = False
        ref = reference.encode(text, add_special_tokens=False).ids
        if ref != ids:
            entry["ids_tokenizer_json"] = ref
            disagreements += 1
        reference.encode_special_tokens = True
        ref_plain = reference.encode(text, add_special_tokens=False).ids
        if ref_plain != plain:
            entry["ids_plain_tokenizer_json"] = ref_plain
        if len(text) <= 2000:
            entry["splits"] = {name: split_ends(s, text) for name, s in splitters.items()}
        if any(unicodedata.category(c) == "Cn" for c in text):
            # Unassigned in this Python's Unicode database; the regex engines (PCRE2 in kvstash,
            # Oniguruma in HF tokenizers) may know a newer Unicode that assigns it.
            entry["unassigned"] = unicodedata.unidata_version
        entries.append(entry)

    entries += [{"hex": b.hex()} for b in MALFORMED]

    with open(os.path.join(MODEL_DIR, MODEL_FILE), "rb") as f:
        sha = hashlib.sha256(f.read()).hexdigest()
    doc = {
        "generator": "tests/reference/make_tokenizer_corpus.py",
        "model_file": MODEL_FILE,
        "model_sha256": sha,
        "versions": {"python": platform.python_version(), "transformers": transformers.__version__,
                     "tokenizers": tokenizers.__version__, "gguf": getattr(gguf, "__version__", "unknown")},
        "oracle": "transformers AutoTokenizer.from_pretrained(models/, gguf_file=...).encode(text, "
                  "add_special_tokens=False); ids_plain: split_special_tokens=True",
        "tokenizer_json_disagreements": disagreements,
        "split_patterns": SPLIT_PATTERNS,
        "entries": entries,
    }
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    with open(OUT, "w", encoding="utf-8") as f:
        json.dump(doc, f, ensure_ascii=False, separators=(",", ":"))
    print(f"wrote {OUT}: {len(entries)} entries ({len(MALFORMED)} malformed), "
          f"{disagreements} where tokenizer.json's pipeline differs from the GGUF one, "
          f"{os.path.getsize(OUT)} bytes", file=sys.stderr)


if __name__ == "__main__":
    main()
