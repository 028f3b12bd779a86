#!/usr/bin/env python3
"""SentencePiece-style tokenizer.json files (BPE with byte fallback, Gemma's and Llama 2's kind) in tiny random-weight
Hugging Face directories, with `tokenizers`' ids and decoded text and transformers fp32 logits (tests/fixtures/hf/spm/).

Writes
  tests/fixtures/hf/spm/gemma3_spm/          Gemma3ForCausalLM bf16 + the "gemma" form below, Gemma 3's chat template
  tests/fixtures/hf/spm/llama_spm/           LlamaForCausalLM f32 + the "metaspace_first" form
  tests/fixtures/hf/spm/tokenizers/<form>.json   the other forms' tokenizer.json (same vocabulary and merges)
  tests/fixtures/hf/spm/spm_tokenizers.json  per form: tokenizers' encode(text, add_special_tokens=False / True) ids and
                                             decode(ids, skip_special_tokens=False) for the corpus; per directory:
                                             transformers logits, and (gemma3_spm) a chat rendered and tokenized by
                                             transformers' apply_chat_template

Method:
  1. A BPE with byte_fallback trained by tokenizers' BpeTrainer on tests/fixtures/text/persuasion_ch1-2.txt (lines,
     normalizer Replace(" " -> "▁"), no pre-tokenizer: merges may cross spaces, as Gemma's do), special tokens
     <pad> <eos> <bos> <unk> <mask> <start_of_turn> <end_of_turn>; then rebuilt with the 256 <0xXX> byte tokens
     after the specials (ids 7..262, model vocabulary, not added tokens, as in Gemma's file) and the trained
     tokens after them in their order; merges unchanged. A BPE trained by tokenizers has one merge per token, so a
     token can be the concatenation of a pair no merge names: SentencePiece's score-driven merge would take it.
     An added non-special token "<h1>" (user-defined, outside the model vocabulary) at the end.
  2. The forms (normalizer / pre-tokenizer / decoder; post-processor TemplateProcessing "<bos> $A" for all):
       gemma                  Replace(" ", "▁") / Split(" ", merged_with_previous) / Replace+ByteFallback+Fuse
                              (transformers' GemmaTokenizer)
       metaspace_first        - / Metaspace(prepend_scheme="first", split=False) / ...+Strip(" ", 1, 0)
                              (transformers' LlamaTokenizer with legacy=False)
       llama2_prepend         Sequence[Prepend("▁"), Replace(" ", "▁")] / - / ...+Strip  (Llama 2's legacy file)
       metaspace_always_split - / Metaspace(prepend_scheme="always", split=True) / ...+Strip
       metaspace_never        - / Metaspace(prepend_scheme="never", split=False) / Replace+ByteFallback+Fuse
  3. Directories: the model from make_hf_checkpoints' config with vocab_size = the tokenizer's size
     (torch.manual_seed, make_transformer_models.redraw), save_pretrained in its dtype, the tokenizer saved by
     transformers' PreTrainedTokenizerFast(tokenizer_object=...).save_pretrained; tokenizer.json is then
     overwritten with the tokenizers file itself (transformers may rewrite the post-processor).
  4. The corpus: tests/reference/tokenizer_corpus.py's strings plus EXTRAS for the two directory forms; the
     handwritten strings plus EXTRAS for the tokenizer-only forms. Reference: tokenizers.Tokenizer.from_file.
     For the directories transformers' AutoTokenizer is checked to agree with tokenizers on every string
     (asserted). Logits: from_pretrained(dir, dtype=float32, eager), one forward per sequence, use_cache=False.

Run: /work/venv-hf/bin/python tests/reference/make_hf_spm_tokenizer.py   (~30 s on 2 cores)
"""
import json
import os
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import refutil  # noqa: E402  (sets HF_HUB_OFFLINE before transformers is imported)
import tokenizer_corpus  # noqa: E402
from make_gemma3_fixtures import TEMPLATE as GEMMA_TEMPLATE  # noqa: E402
from make_hf_checkpoints import TORCH_DTYPE, gemma3_config, llama_config  # noqa: E402
from make_transformer_models import redraw  # noqa: E402

import torch  # noqa: E402

OUT = os.path.join(refutil.FIXTURES, "hf", "spm")
CORPUS = os.path.join(refutil.FIXTURES, "text", "persuasion_ch1-2.txt")
SPECIALS = ["<pad>", "<eos>", "<bos>", "<unk>", "<mask>", "<start_of_turn>", "<end_of_turn>"]
BOS, EOS = 2, 1
TRAINED_VOCAB = 400  # specials + alphabet + merges; the 256 byte tokens come on top
SPACE = "\u2581"
EXTRAS = [
    "Hello world", " Hello world", "  Hello  world  ", "Hello   world", "\tTabbed\tline", "line one\nline two\n\n",
    " \n \n", "   ", "Anne Elliot", "Sir Walter Elliot, of Kellynch Hall", "was a man who", "the the the the",
    "café naïve", "Ελληνικά", "日本語", "😀 emoji 👍🏽", "a😀b", "\u2581already a mark", "▁▁", "x\u2581 y",
    "<start_of_turn>user\nHi there<end_of_turn>\n<start_of_turn>model\n", "<bos>Hello", "Hello<eos>", "a<eos>b",
    "<eos><eos>", "<start_of_turn> spaced <end_of_turn>", "<h1>Title</h1>", "x<h1>y", "<unk>", "<0x41>", "<mask>",
    "<pad> padded", "a" * 40, "Elliot " * 12,
]
CHAT = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Who is Anne Elliot?"},
        {"role": "assistant", "content": "The heroine of Persuasion."}, {"role": "user", "content": "Thanks!"}]
SEQUENCES = [[BOS, 17, 300, 45, 263, 99, 401, 12, 7, 250, 64, 64, 1, 510, 88, 150, 42, 5, 360, 30],
             [300, 301, 302, 303, 304, 305, 306, 307, 308, 309, 310, 311]]


def decoder(strip):
    from tokenizers import decoders
    steps = [decoders.Replace(SPACE, " "), decoders.ByteFallback(), decoders.Fuse()]
    return decoders.Sequence(steps + ([decoders.Strip(" ", 1, 0)] if strip else []))


def train():
    from tokenizers import Tokenizer, models, normalizers, trainers
    with open(CORPUS, encoding="utf-8") as f:
        lines = [ln for ln in f.read().split("\n") if ln.strip()]

    def once():
        tok = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True))
        tok.normalizer = normalizers.Replace(" ", SPACE)
        trainer = trainers.BpeTrainer(vocab_size=TRAINED_VOCAB, special_tokens=SPECIALS, show_progress=False)
        tok.train_from_iterator(lines, trainer=trainer)
        return json.loads(tok.to_str())

    model = once()["model"]
    assert model == once()["model"], "BPE training is not deterministic"
    trained = sorted(model["vocab"].items(), key=lambda kv: kv[1])
    assert [t for t, _ in trained[:len(SPECIALS)]] == SPECIALS
    vocab = {t: i for i, t in enumerate(SPECIALS)}
    for b in range(256):
        vocab[f"<0x{b:02X}>"] = len(vocab)
    for t, _ in trained[len(SPECIALS):]:
        assert t not in vocab, t
        vocab[t] = len(vocab)
    merges = [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in model["merges"]]
    return vocab, merges


def build_form(form, vocab, merges):
    from tokenizers import AddedToken, Tokenizer, models, normalizers, pre_tokenizers, processors
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    if form == "gemma":
        tok.normalizer = normalizers.Replace(" ", SPACE)
        tok.pre_tokenizer = pre_tokenizers.Split(" ", behavior="merged_with_previous", invert=False)
        tok.decoder = decoder(strip=False)
    elif form == "llama2_prepend":
        tok.normalizer = normalizers.Sequence([normalizers.Prepend(SPACE), normalizers.Replace(" ", SPACE)])
        tok.decoder = decoder(strip=True)
    else:
        scheme, split = {"metaspace_first": ("first", False), "metaspace_always_split": ("always", True),
                         "metaspace_never": ("never", False)}[form]
        tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement=SPACE, prepend_scheme=scheme, split=split)
        tok.decoder = decoder(strip=scheme != "never")
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in SPECIALS])
    tok.add_tokens([AddedToken("<h1>", special=False, normalized=False)])
    tok.post_processor = processors.TemplateProcessing(single="<bos> $A", special_tokens=[("<bos>", BOS)])
    return tok


def cases(form, tok, texts):
    out = []
    for text in texts:
        ids = tok.encode(text, add_special_tokens=False).ids
        entry = {"form": form, "text": text, "ids": ids}
        with_special = tok.encode(text, add_special_tokens=True).ids
        assert with_special == [BOS] + ids, (text, with_special)
        decoded = tok.decode(ids, skip_special_tokens=False)
        if decoded != text:
            entry["decoded"] = decoded
        out.append(entry)
    return out


def save_dir(name, tok, make_config, cls, dtype, seed, template):
    import transformers
    from transformers import PreTrainedTokenizerFast
    model_dir = os.path.join(OUT, name)
    shutil.rmtree(model_dir, ignore_errors=True)
    config = make_config()
    config.vocab_size = tok.get_vocab_size()
    config.bos_token_id, config.eos_token_id, config.pad_token_id = BOS, EOS, 0
    config._attn_implementation = "eager"
    torch.manual_seed(seed)
    model = getattr(transformers, cls)(config).to(torch.float32)
    redraw(model, seed)
    model.to(TORCH_DTYPE[dtype]).save_pretrained(model_dir)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<bos>", eos_token="<eos>", unk_token="<unk>",
                                   pad_token="<pad>", mask_token="<mask>", add_bos_token=True)
    fast.save_pretrained(model_dir)
    for extra in ("generation_config.json", "special_tokens_map.json", "chat_template.jinja"):
        if os.path.exists(os.path.join(model_dir, extra)):
            os.remove(os.path.join(model_dir, extra))
    tok.save(os.path.join(model_dir, "tokenizer.json"))
    cfg_path = os.path.join(model_dir, "tokenizer_config.json")
    with open(cfg_path, encoding="utf-8") as f:
        tcfg = json.load(f)
    tcfg["chat_template"] = template
    with open(cfg_path, "w", encoding="utf-8") as f:
        json.dump(tcfg, f, indent=2, ensure_ascii=False)
    return model_dir


@torch.no_grad()
def logits_of(cls, model_dir):
    import transformers
    model = getattr(transformers, cls).from_pretrained(model_dir, dtype=torch.float32, attn_implementation="eager")
    model.eval()
    return [refutil.f32_rows(model(torch.tensor([s]), use_cache=False).logits[0].float().numpy()) for s in SEQUENCES]


def main():
    from tokenizers import Tokenizer
    from transformers import AutoTokenizer
    vocab, merges = train()
    os.makedirs(os.path.join(OUT, "tokenizers"), exist_ok=True)
    full = list(dict.fromkeys(tokenizer_corpus.corpus_texts() + EXTRAS))
    short = list(dict.fromkeys(tokenizer_corpus.HANDWRITTEN + EXTRAS))
    simple_template = ("{% for m in messages %}<start_of_turn>{{ m['role'] }}\n{{ m['content'] }}<end_of_turn>\n"
                       "{% endfor %}{% if add_generation_prompt %}<start_of_turn>model\n{% endif %}")
    dirs = {
        "gemma": ("gemma3_spm", gemma3_config, "Gemma3ForCausalLM", "bf16", 601, GEMMA_TEMPLATE),
        "metaspace_first": ("llama_spm", llama_config, "LlamaForCausalLM", "f32", 602, simple_template),
    }
    forms, models, all_cases = [], [], []
    for form in ["gemma", "metaspace_first", "llama2_prepend", "metaspace_always_split", "metaspace_never"]:
        tok = build_form(form, vocab, merges)
        if form in dirs:
            name, make_config, cls, dtype, seed, template = dirs[form]
            model_dir = save_dir(name, tok, make_config, cls, dtype, seed, template)
            path = os.path.join(model_dir, "tokenizer.json")
            ref = Tokenizer.from_file(path)
            hf = AutoTokenizer.from_pretrained(model_dir)
            for t in full:
                assert hf.encode(t, add_special_tokens=False) == ref.encode(t, add_special_tokens=False).ids, (form, t)
            entry = {"name": name, "class": cls, "dtype": dtype, "sequences": SEQUENCES,
                     "logits": logits_of(cls, model_dir)}
            if form == "gemma":
                text = hf.apply_chat_template(CHAT, tokenize=False, add_generation_prompt=True)
                ids = hf.apply_chat_template(CHAT, tokenize=True, add_generation_prompt=True)
                ids = ids["input_ids"] if isinstance(ids, dict) or hasattr(ids, "keys") else ids
                entry["chat"] = {"messages": CHAT, "rendered": text, "ids": list(ids)}
            models.append(entry)
            texts = full
        else:
            path = os.path.join(OUT, "tokenizers", form + ".json")
            tok.save(path)
            ref = Tokenizer.from_file(path)
            texts = short
        forms.append({"form": form, "tokenizer": refutil.rel(path), "n_vocab": ref.get_vocab_size()})
        all_cases += cases(form, ref, texts)
        print(f"{form}: {len(texts)} texts, {ref.get_vocab_size()} ids", file=sys.stderr)
    refutil.write_json(os.path.join(OUT, "spm_tokenizers.json"), {
        "generator": refutil.generator(__file__),
        "versions": refutil.versions(),
        "method": "tokenizers.Tokenizer.from_file(tokenizer.json): encode(text, add_special_tokens=False).ids -> ids "
                  "(add_special_tokens=True is asserted to be [<bos>] + ids), decode(ids, skip_special_tokens=False) "
                  "-> decoded where it is not the text; models: transformers from_pretrained(dir, dtype=float32, "
                  "eager) logits, one forward per sequence; chat: AutoTokenizer.apply_chat_template(messages, "
                  "add_generation_prompt=True), text and ids",
        "bos": BOS, "merges": len(merges),
        "models": models,
        "forms": forms,
        "cases": all_cases,
    })


if __name__ == "__main__":
    main()
