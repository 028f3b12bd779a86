#!/usr/bin/env python3
"""llama.cpp's grammar matcher as the reference for kvstash's: accept/reject of many strings under
GBNF grammars -> tests/fixtures/grammar/llamacpp_accept.json (read by tests/parity/grammar_llamacpp_test.cpp).

Run with the Python of a venv that has llama-cpp-python==0.3.36 (see README.md, the llama.cpp venv):

  /tmp/venv-llamacpp/bin/python tests/reference/make_grammar_fixture.py

Method: the tiny model's vocabulary (tests/fixtures/tiny/gqa_f32.gguf, loaded vocab_only) has one token
per byte, so a string is fed to llama.cpp's grammar sampler (llama_sampler_init_grammar) one byte-token
at a time: before each, llama_sampler_apply on a one-candidate array says whether the token is allowed
(its logit stays finite); if it is, llama_sampler_accept advances the grammar. The string is accepted iff
every byte was allowed and then the end-of-generation token <|endoftext|> is allowed (the grammar can
end). Grammars: llama.cpp's json, arithmetic and list examples (llama_cpp.llama_grammar's JSON_GBNF,
ARITHMETIC_GBNF, LIST_GBNF) and a few small ones covering repetitions, classes and UTF-8. Strings:
hand-written valid and invalid ones, plus deterministic random edits of them (seeded: delete, insert,
replace or duplicate a character or a slice, truncate), so that most verdicts are not written by hand.
"""
import ctypes
import os
import random
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import llama_cpp  # noqa: E402
from llama_cpp import llama_grammar  # noqa: E402

import refutil  # noqa: E402

TINY = os.path.join(refutil.FIXTURES, "tiny", "gqa_f32.gguf")
OUT = os.path.join(refutil.FIXTURES, "grammar", "llamacpp_accept.json")

SMALL = {
    "alternatives": ('root ::= "ab" | "c" | "d"+ "e"?\n', ["ab", "c", "ddd", "de", "a", "abc", "", "e"]),
    "counted": ('root ::= ("x" | "yz"){2,4} [0-9]{0,2}\n', ["xx", "xyzx", "xxxx7", "x", "xxxxx", "yzyz12", "yzyz123"]),
    "classes": ('root ::= [a-cx-z] [^a-z\\n]* "."\n', ["a.", "zA1 ?.", "d.", "a\n.", "b", "xÉ€.", "c..."]),
    "unicode": ('root ::= "é" [一-龥]+ ("😀" | [\\u00e0-\\u00ff])?\n', ["é中", "é中文😀", "é中à", "e中", "é", "é中😁"]),
    "nested": ('root ::= item ("," item)*\nitem ::= "(" root? ")" | [0-9]\n', ["1", "(1,2)", "((()))", "(,)", "(1", "1,(2,(3))"]),
    "any": ('root ::= "<" .{1,3} ">"\n', ["<a>", "<abc>", "<>", "<abcd>", "<€€>"]),
}

VALID = {
    "json": ['{}', '{"a": 1}', '{"a": [1, 2.5, -3e10, "x\\n", true, null, {}]}', '{\n  "k": "v",\n  "n": {"m": []}\n}',
             '{"u": "\\u00e9 é 中"}', '{"a":1} ', '[1]', '{"a": 01}', '{"a": "\x01"}', '{"a":}', '{"a": 1,}'],
    "arithmetic": ["x = 1\n", "x+1 = 2\n", "(ab1*3)/y = z\nz=1\n", "x = 1+2\n", "1x = 2\n", "x = (1)\n"],
    "list": ["- a\n", "- a\n- bc d\n", "- \n", "-a\n", "- x\n- \n", "- é€\n"],
}


def main() -> None:
    llama_cpp.llama_backend_init()
    params = llama_cpp.llama_model_default_params()
    params.vocab_only = True
    model = llama_cpp.llama_model_load_from_file(TINY.encode(), params)
    vocab = llama_cpp.llama_model_get_vocab(model)
    buf = ctypes.create_string_buffer(64)
    byte_token = {}
    for t in range(llama_cpp.llama_vocab_n_tokens(vocab)):
        k = llama_cpp.llama_token_to_piece(vocab, t, buf, 64, 0, True)
        if k == 1 and buf.raw[0] not in byte_token:
            byte_token[buf.raw[0]] = t
    assert len(byte_token) == 256
    eos = llama_cpp.llama_vocab_eos(vocab)

    def allowed(sampler, token: int) -> bool:
        arr = (llama_cpp.llama_token_data * 1)()
        arr[0].id, arr[0].logit, arr[0].p = token, 0.0, 0.0
        a = llama_cpp.llama_token_data_array(data=arr, size=1, selected=-1, sorted=False)
        llama_cpp.llama_sampler_apply(sampler, ctypes.byref(a))
        return arr[0].logit != float("-inf")

    def accepts(grammar: str, text: str) -> bool:
        sampler = llama_cpp.llama_sampler_init_grammar(vocab, grammar.encode(), b"root")
        assert sampler, grammar
        try:
            for b in text.encode():
                if not allowed(sampler, byte_token[b]):
                    return False
                llama_cpp.llama_sampler_accept(sampler, byte_token[b])
            return allowed(sampler, eos)
        finally:
            llama_cpp.llama_sampler_free(sampler)

    rng = random.Random(18)
    alphabet = list('{}[]",:0123456789.-+eE tfnrul\n\\abcxyzé中()*/=')

    def edits(text: str, count: int) -> list:
        out = []
        for _ in range(count):
            s = text
            for _ in range(rng.randint(1, 2)):
                i = rng.randint(0, len(s))
                op = rng.choice(["delete", "insert", "replace", "duplicate", "truncate"])
                if op == "delete" and s:
                    i = min(i, len(s) - 1)
                    s = s[:i] + s[i + 1:]
                elif op == "insert":
                    s = s[:i] + rng.choice(alphabet) + s[i:]
                elif op == "replace" and s:
                    i = min(i, len(s) - 1)
                    s = s[:i] + rng.choice(alphabet) + s[i + 1:]
                elif op == "duplicate" and s:
                    j = rng.randint(i, min(len(s), i + 6))
                    s = s[:j] + s[i:j] + s[j:]
                elif op == "truncate":
                    s = s[:i]
            out.append(s)
        return out

    grammars = {"json": llama_grammar.JSON_GBNF, "arithmetic": llama_grammar.ARITHMETIC_GBNF,
                "list": llama_grammar.LIST_GBNF}
    cases = []
    for name, text in grammars.items():
        cases.append((name, text, VALID[name]))
    for name, (text, strings) in SMALL.items():
        cases.append((name, text, strings))
    out_cases = []
    for name, grammar, strings in cases:
        all_strings = list(dict.fromkeys(strings + [e for s in strings for e in edits(s, 8)]))
        verdicts = [{"text": s, "accepted": accepts(grammar, s)} for s in all_strings]
        out_cases.append({"name": name, "grammar": grammar, "strings": verdicts})
        print(f"{name}: {len(verdicts)} strings, {sum(v['accepted'] for v in verdicts)} accepted")

    refutil.write_json(OUT, {
        "generator": refutil.generator(__file__),
        "command": refutil.command_line(),
        "versions": {"python": sys.version.split()[0], "llama_cpp_python": llama_cpp.__version__},
        "method": __doc__.split("Method: ")[1].strip().replace("\n", " "),
        "cases": out_cases,
    })


if __name__ == "__main__":
    main()
