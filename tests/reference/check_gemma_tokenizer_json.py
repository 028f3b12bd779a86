#!/usr/bin/env python3
"""Gemma 3's real vocabulary as a SentencePiece-style tokenizer.json, for a by-hand check of kvstash's model-directory
tokenizer (nothing here is committed: the tokenizer.json is ~30 MB).

transformers builds Gemma 3's fast tokenizer from the GGUF (AutoTokenizer.from_pretrained(models/,
gguf_file=gemma-3-270m-q4_k_m.gguf): its GemmaTokenizer form, merges rebuilt from the vocabulary in file order) and
saves it to OUT (tokenizer.json, tokenizer_config.json; plus a config.json with vocab_size). For every text of
tests/fixtures/gemma3/tokenizer_corpus.json (the shared corpus + Gemma's extras; malformed UTF-8 skipped) and
make_hf_spm_tokenizer.EXTRAS, OUT/expected.json gets tokenizers' encode(text, add_special_tokens=False) ids, its
decode(ids), and the fixture's llama.cpp ids of the GGUF (special=True) as gguf_ids. transformers' own encode is
asserted to agree with tokenizers'. Then:

  KVSTASH_GEMMA_TOKENIZER_DIR=OUT build/parity_hf_spm_tokenizer --gtest_filter='*RealGemma*'

Run: /work/venv-hf/bin/python tests/reference/check_gemma_tokenizer_json.py [--out /tmp/gemma_tokenizer_json]
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import refutil  # noqa: E402
from make_hf_spm_tokenizer import EXTRAS  # noqa: E402

GGUF = "gemma-3-270m-q4_k_m.gguf"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="/tmp/gemma_tokenizer_json")
    ap.add_argument("--models", default=os.environ.get("KVSTASH_MODELS_DIR", os.path.join(refutil.REPO_ROOT, "models")))
    args = ap.parse_args()
    from tokenizers import Tokenizer
    from transformers import AutoTokenizer

    hf = AutoTokenizer.from_pretrained(args.models, gguf_file=GGUF)
    os.makedirs(args.out, exist_ok=True)
    hf.save_pretrained(args.out)
    for extra in ("special_tokens_map.json", "chat_template.jinja"):
        if os.path.exists(os.path.join(args.out, extra)):
            os.remove(os.path.join(args.out, extra))
    ref = Tokenizer.from_file(os.path.join(args.out, "tokenizer.json"))
    with open(os.path.join(args.out, "config.json"), "w") as f:
        json.dump({"architectures": ["Gemma3ForCausalLM"], "vocab_size": ref.get_vocab_size()}, f)

    with open(os.path.join(refutil.FIXTURES, "gemma3", "tokenizer_corpus.json"), encoding="utf-8") as f:
        corpus = json.load(f)
    texts = [(e["text"], e["ids"]) for e in corpus["entries"] if "text" in e] + [(t, None) for t in EXTRAS]
    cases, differ_llamacpp, differ_transformers = [], 0, 0
    for text, gguf_ids in texts:
        ids = ref.encode(text, add_special_tokens=False).ids
        if hf.encode(text, add_special_tokens=False) != ids:
            differ_transformers += 1
        case = {"text": text, "ids": ids, "decoded": ref.decode(ids, skip_special_tokens=False)}
        if gguf_ids is not None:
            case["gguf_ids"] = gguf_ids
            differ_llamacpp += gguf_ids != ids
        cases.append(case)
    with open(os.path.join(args.out, "expected.json"), "w", encoding="utf-8") as f:
        json.dump({"generator": refutil.generator(__file__), "versions": refutil.versions(), "cases": cases}, f,
                  ensure_ascii=False)
    n_gguf = sum("gguf_ids" in c for c in cases)
    print(f"{len(cases)} texts; tokenizers vs llama.cpp (GGUF) ids differ on {differ_llamacpp} of {n_gguf}; "
          f"transformers vs tokenizers differ on {differ_transformers}; vocab {ref.get_vocab_size()}; written to "
          f"{args.out}", file=sys.stderr)
    assert differ_transformers == 0


if __name__ == "__main__":
    main()
