#!/usr/bin/env python3
"""Writes tests/fixtures/tokenizer/<vocab>_corpus.json for llama.cpp's vocab-only GGUFs (Llama 3,
Qwen2, GPT-2, Llama 2 SentencePiece, Phi-3): Hugging Face token ids for the corpus of
tokenizer_corpus.py, the oracle for tests/parity/tokenizer_vocabs_test.cpp.

    scripts/fetch_vocabs.sh        # models/vocabs/ggml-vocab-*.gguf{,.inp,.out}
    HF_HUB_OFFLINE=1 /work/venv-ref/bin/python tests/reference/make_vocab_corpora.py [vocab ...]

The vocabularies are read from $KVSTASH_MODELS_DIR/vocabs, else models/vocabs.

Oracle: transformers AutoTokenizer.from_pretrained(models/vocabs, gguf_file=ggml-vocab-<vocab>.gguf),
the tokenizer transformers builds from the GGUF's tokenizer.ggml.* metadata, corrected where its GGUF
converter departs from the model's own tokenizer.json (FIXES below; each fixture lists the ones
applied under "fixes"). Before writing anything the script checks the corrected tokenizer against
llama.cpp's test-tokenizer-0 cases (<gguf>.inp / .out, whose ids came from the model's real HF
tokenizer) and stops if one differs; the fixture records both counts, before and after the fixes.

Per string (entries):
  ids           encode(text, add_special_tokens=False): special-token text becomes the special token.
  ids_plain     the same with split_special_tokens=True (special-token text tokenized as text), only
                where it differs from `ids`.
  ids_transformers_gguf, ids_plain_transformers_gguf
                only where they differ: what transformers' GGUF tokenizer gives without the fixes.
  normalized    where the tokenizer's normalizer changes the text (Qwen2: NFC), the normalized text:
                what decode(encode(text)) gives back.
  round_trip, round_trip_plain
                where they differ from the text (or `normalized`): the text decode(encode(text)) gives
                back, with and without parsing special tokens, for tokens that swallow the whitespace
                after them (Phi-3's rstrip added tokens).
  unassigned    present (with Python's Unicode version) when the text holds a code point unassigned
                there; kvstash's PCRE2 (10.42: Unicode 14) and HF's regex engine may classify it
                differently.
  extra         present on strings added for this vocabulary (its own special tokens, chat markup),
                after the shared corpus.
  hex           malformed UTF-8 (tokenizer_corpus.MALFORMED) in hex, with no ids: the test checks only
                that encoding does not fail and that decoding gives the bytes back.
"""

import argparse
import hashlib
import json
import os
import platform
import re
import sys
import unicodedata

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import gguf  # noqa: E402
import tokenizers  # noqa: E402
import transformers  # noqa: E402
from importlib.metadata import version  # noqa: E402
from tokenizers import AddedToken, normalizers  # noqa: E402
from transformers import AutoTokenizer  # noqa: E402

import refutil  # noqa: E402
from tokenizer_corpus import MALFORMED, corpus_texts  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
VOCAB_DIR = os.path.join(os.environ.get("KVSTASH_MODELS_DIR") or os.path.join(ROOT, "models"), "vocabs")
FIXTURE_DIR = os.path.join(ROOT, "tests", "fixtures", "tokenizer")
MAX_FIXTURE_BYTES = 1_000_000
LLAMA_CPP_SEPARATOR = "\n__ggml_vocab_test__\n"


# --- Fixes: where transformers' GGUF converter differs from the model's own tokenizer.json. ----------

def fix_ignore_merges(hf):
    """Llama 3's tokenizer.json has model.ignore_merges = true: a pre-tokenized word that is itself a
    token is emitted whole, without running the merges. The GGUF converter builds the BPE model with
    ignore_merges = false ("Cửa Việt" in llama.cpp's cases shows the difference)."""
    hf.backend_tokenizer.model.ignore_merges = True


def fix_nfc(hf):
    """Qwen2's tokenizer.json has normalizer NFC (transformers' own Qwen2Tokenizer sets it too); the
    GGUF converter builds the backend through GPT2Tokenizer and leaves no normalizer."""
    hf.backend_tokenizer.normalizer = normalizers.NFC()


def fix_sentencepiece_prefix(hf):
    """Llama 2's tokenizer.json (legacy) has normalizer Sequence[Prepend("▁"), Replace(" ", "▁")] and no
    pre-tokenizer, like the Phi-3 shape transformers' GGUF converter already builds for arch phi3. For
    arch llama it builds Metaspace(prepend_scheme="first"), which adds no "▁" to a text that already
    starts with a space (" Hello" becomes "▁Hello", not "▁▁Hello"; 15 of llama.cpp's cases show it)."""
    backend = hf.backend_tokenizer
    backend.normalizer = normalizers.Sequence([normalizers.Prepend("\u2581"), normalizers.Replace(" ", "\u2581")])
    backend.pre_tokenizer = None


# Phi-3's tokenizer_config.json added_tokens_decoder: rstrip = true on </s> and on every special token
# but <unk>, <s> and <|endoftext|>; llama.cpp sets the same LLAMA_TOKEN_ATTR_RSTRIP for a general.name
# containing "phi-3"/"phi3" (llama-vocab.cpp). The GGUF converter adds them with rstrip = false.
PHI3_NO_RSTRIP = {"<unk>", "<s>", "<|endoftext|>"}


def phi3_rstrip_tokens(hf):
    return sorted(t.content for t in hf.added_tokens_decoder.values()
                  if (t.special or t.content == "</s>") and t.content not in PHI3_NO_RSTRIP)


def fix_phi3_rstrip(hf):
    """Phi-3's added tokens <|user|>, <|assistant|>, <|end|>, <|system|>, <|placeholderN|> and </s> have
    rstrip = true (they swallow the whitespace after them); the GGUF converter drops the flag."""
    wanted = set(phi3_rstrip_tokens(hf))
    by_content = {t.content: (i, t) for i, t in hf.added_tokens_decoder.items()}
    for content in wanted:
        _, token = by_content[content]
        hf.add_tokens([AddedToken(content, lstrip=False, rstrip=True, normalized=False, special=token.special)],
                      special_tokens=token.special)
    still = {t.content for t in hf.added_tokens_decoder.values() if t.rstrip}
    assert still == wanted, (still, wanted)


def fix_special_set(hf):
    """Phi-3's tokenizer.json has </s> as an added token with special = false (so split_special_tokens
    leaves it matched, as llama.cpp does with user-defined tokens), and the GGUF says user-defined. The
    converter goes through LlamaTokenizer, whose default eos_token "</s>" puts it in the backend's set
    of special tokens anyway; rebuilding the backend from its own JSON (where </s> has special = false)
    clears that."""
    hf._tokenizer = tokenizers.Tokenizer.from_str(hf._tokenizer.to_str())


def fix_phantom_tokens(hf):
    """Llama 3 has no <|endoftext|>, but the converter builds the tokenizer through GPT2Tokenizer, whose
    default unk/bos/eos "<|endoftext|>" gets added as a new special token with id 128256, one past the
    vocabulary (and past the model's embeddings). Removing added tokens the GGUF does not have leaves
    what Llama 3's tokenizer.json has."""
    backend = json.loads(hf._tokenizer.to_str())
    n_vocab = len(hf._tokenizer.get_vocab(with_added_tokens=False))
    backend["added_tokens"] = [t for t in backend["added_tokens"] if t["id"] < n_vocab]
    hf._tokenizer = tokenizers.Tokenizer.from_str(json.dumps(backend))


VOCABS = {
    "llama-bpe": {
        "model": "Llama 3 (Meta-Llama-3-8B tokenizer; byte-level BPE, pre llama-bpe)",
        "fixes": [fix_ignore_merges, fix_phantom_tokens],
        "extras": [
            "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi there!<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n",
            "<|begin_of_text|>", "<|eot_id|>", "text<|end_of_text|>more", "<|reserved_special_token_5|>x",
            "<|begin_of_text", "<|eot_id|><|eot_id|>", " <|eot_id|> ",
        ],
    },
    "qwen2": {
        "model": "Qwen2 (Qwen1.5/Qwen2 tokenizer; byte-level BPE, pre qwen2)",
        "fixes": [fix_nfc],
        "extras": [
            "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nCafe\u0301?<|im_end|>\n",
            "\u212b\u2126 \ufb01 \uf900", "\u1100\u1161\u11a8", "\u0041\u030a\u0301", "q\u0307\u0323",
        ],
    },
    "gpt-2": {
        "model": "GPT-2 (byte-level BPE, pre gpt-2)",
        "fixes": [],
        "extras": ["text<|endoftext|>more", " <|endoftext|> "],
    },
    "llama-spm": {
        "model": "Llama 2 (SentencePiece BPE with byte fallback)",
        "fixes": [fix_sentencepiece_prefix],
        "extras": [
            "<s>[INST] <<SYS>>\nBe brief.\n<</SYS>>\n\nHi there [/INST]", "<s>", "</s>", "<unk>",
            "a<s>b</s>c", " <s> ", "<s> </s>", "\u2581", "a\u2581b", "\u2581\u2581 x",
        ],
    },
    "phi-3": {
        "model": "Phi-3 (Phi-3-mini tokenizer; SentencePiece BPE with byte fallback)",
        "fixes": [fix_phi3_rstrip, fix_special_set],
        "extras": [
            "<|user|>\nHi there<|end|>\n<|assistant|>\n", "<|system|>  \t\n sys<|end|>\u3000x",
            "a</s>  b", "</s>\n", "</s>\x1c\x1dz", "<|end|>\u2028\u00a0\x85y", "<s> x", "<|endoftext|> x",
            "<|end|>", "<|end|> ", "<|placeholder3|>\n\ny",
        ],
    },
}


def read_llama_cpp_cases(path):
    """llama.cpp's test-tokenizer-0 files: <path>.inp holds the strings, each followed by a line
    "__ggml_vocab_test__"; <path>.out one line of space-separated ids per string."""
    with open(path + ".inp", encoding="utf-8", newline="") as f:
        raw = f.read()
    texts = raw.split(LLAMA_CPP_SEPARATOR)
    assert texts[-1] == "", "the .inp file does not end with the separator"
    texts = texts[:-1]
    with open(path + ".out", encoding="utf-8", newline="") as f:
        lines = f.read().split("\n")
    assert lines[-1] == ""
    ids = [[int(x) for x in line.split()] for line in lines[:-1]]
    assert len(ids) == len(texts), (len(ids), len(texts))
    return list(zip(texts, ids))


def encode(hf, text, parse_special):
    return hf.encode(text, add_special_tokens=False, split_special_tokens=not parse_special)


# Unicode White_Space (Rust char::is_whitespace). Python's \s also takes U+001C..U+001F, which Rust does not.
WHITE_SPACE = "[\t\n\x0b\x0c\r \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]"


def round_trip_text(text, rstrip_tokens, parse_special):
    """The text kvstash's decode(encode(text)) should give back when some added tokens swallow the
    whitespace after them (HF AddedToken rstrip: Rust char::is_whitespace, Unicode White_Space)."""
    if not rstrip_tokens:
        return text
    eligible = [t for t in rstrip_tokens if parse_special or t == "</s>"]
    if not eligible:
        return text
    tokens = "|".join(re.escape(t) for t in sorted(eligible, key=len, reverse=True))
    pattern = f"({tokens}){WHITE_SPACE}+"
    return re.sub(pattern, r"\1", text)


def sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def make(name, spec):
    gguf_file = f"ggml-vocab-{name}.gguf"
    path = os.path.join(VOCAB_DIR, gguf_file)
    if not os.path.exists(path):
        sys.exit(f"{path} is missing; run scripts/fetch_vocabs.sh")
    cases = read_llama_cpp_cases(path)

    converted = AutoTokenizer.from_pretrained(VOCAB_DIR, gguf_file=gguf_file)
    hf = AutoTokenizer.from_pretrained(VOCAB_DIR, gguf_file=gguf_file)
    for fix in spec["fixes"]:
        fix(hf)
    out_converted = sum(encode(converted, t, False) == ids for t, ids in cases)
    out_fixed = 0
    for text, ids in cases:
        got = encode(hf, text, False)
        out_fixed += got == ids
        if got != ids:
            print(f"{name}: llama.cpp case {text!r}: HF {got}, .out {ids}", file=sys.stderr)
    if out_fixed != len(cases):
        sys.exit(f"{name}: the corrected HF tokenizer reproduces {out_fixed}/{len(cases)} of llama.cpp's "
                 f".out ids; fix the oracle before writing a fixture")

    n_tokens = len(gguf.GGUFReader(path).fields["tokenizer.ggml.tokens"].data)
    rstrip = phi3_rstrip_tokens(hf) if fix_phi3_rstrip in spec["fixes"] else []
    normalizer = hf.backend_tokenizer.normalizer
    nfc = fix_nfc in spec["fixes"]
    texts = [(t, False) for t in corpus_texts()] + [(t, True) for t in spec["extras"]]
    entries, differs_from_converter = [], 0
    for text, extra in texts:
        ids = encode(hf, text, True)
        plain = encode(hf, text, False)
        if max(ids + plain, default=0) >= n_tokens:
            sys.exit(f"{name}: HF gives an id past the {n_tokens}-token vocabulary for {text!r}: {ids}")
        entry = {"text": text, "ids": ids}
        if plain != ids:
            entry["ids_plain"] = plain
        conv, conv_plain = encode(converted, text, True), encode(converted, text, False)
        if conv != ids:
            entry["ids_transformers_gguf"] = conv
        if conv_plain != plain:
            entry["ids_plain_transformers_gguf"] = conv_plain
        differs_from_converter += conv != ids or conv_plain != plain
        base = unicodedata.normalize("NFC", text) if nfc else text
        if base != text:
            entry["normalized"] = base
        for key, parse_special in (("round_trip", True), ("round_trip_plain", False)):
            back = round_trip_text(base, rstrip, parse_special)
            if back != base:
                entry[key] = back
        if any(unicodedata.category(c) == "Cn" for c in text):
            entry["unassigned"] = unicodedata.unidata_version
        if extra:
            entry["extra"] = True
        entries.append(entry)
    entries += [{"hex": b.hex()} for b in MALFORMED]

    doc = {
        "generator": "tests/reference/make_vocab_corpora.py",
        "vocab": name,
        "model": spec["model"],
        "gguf_file": gguf_file,
        "gguf_sha256": sha256(path),
        "gguf_source": "PyPI sdist llama-cpp-python==0.3.36, vendor/llama.cpp/models/ (scripts/fetch_vocabs.sh)",
        "versions": {"python": platform.python_version(), "transformers": transformers.__version__,
                     "tokenizers": tokenizers.__version__, "gguf": version("gguf"),
                     "unicodedata": unicodedata.unidata_version},
        "oracle": "transformers AutoTokenizer.from_pretrained(models/vocabs, gguf_file=...), with `fixes` "
                  "applied; encode(text, add_special_tokens=False); ids_plain: split_special_tokens=True",
        "fixes": [{"name": fix.__name__, "why": " ".join(fix.__doc__.split())} for fix in spec["fixes"]],
        "rstrip_tokens": rstrip,
        "normalizer": json.loads(normalizer.__getstate__()) if normalizer is not None else None,
        "llama_cpp_out_matches": {"total": len(cases), "transformers_gguf": out_converted, "fixed": out_fixed},
        "differs_from_transformers_gguf": differs_from_converter,
        "dropped_longest": [],
        "entries": entries,
    }
    write(doc, os.path.join(FIXTURE_DIR, f"{name}_corpus.json"))


def write(doc, out):
    """Writes the fixture (refutil layout: one entry per line), dropping the longest corpus strings
    while it is over MAX_FIXTURE_BYTES (recorded in dropped_longest)."""
    while True:
        refutil.write_json(out, doc)
        if os.path.getsize(out) <= MAX_FIXTURE_BYTES:
            break
        texts = [e for e in doc["entries"] if "text" in e and not e.get("extra")]
        longest = max(texts, key=lambda e: len(e["text"].encode("utf-8")))
        doc["entries"].remove(longest)
        doc["dropped_longest"].append({"chars": len(longest["text"]), "starts": longest["text"][:40]})
    n = sum("text" in e for e in doc["entries"])
    print(f"wrote {out}: {n} strings + {len(MALFORMED)} malformed, {os.path.getsize(out)} bytes; llama.cpp "
          f".out {doc['llama_cpp_out_matches']}; {doc['differs_from_transformers_gguf']} strings differ from "
          f"transformers' GGUF tokenizer; dropped {len(doc['dropped_longest'])}", file=sys.stderr)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("vocabs", nargs="*", default=list(VOCABS), help=f"some of {', '.join(VOCABS)}")
    args = parser.parse_args()
    for name in args.vocabs:
        if name not in VOCABS:
            parser.error(f"unknown vocab {name!r}")
        make(name, VOCABS[name])


if __name__ == "__main__":
    main()
