"""Embeddings of the default model (SmolLM2-135M-Instruct Q4_1) by llama.cpp, for /v1/embeddings.

Run with the llama.cpp venv's Python (llama-cpp-python 0.3.36, see README.md):
    /tmp/venv-llamacpp/bin/python tests/reference/make_embedding_fixture.py [--model PATH]
writes tests/fixtures/smollm2/embeddings.json.

Method: Llama(model, embedding=True, pooling_type=LLAMA_POOLING_TYPE_MEAN).create_embedding(text) —
llama.cpp's mean pooling of the final-norm hidden states ("result_norm", the embedding llama-server
pools with --pooling mean) over every token of the text, tokenized with add_bos=True and special=False
(SmolLM2 adds no BOS, and the texts hold no special tokens, so this equals kvstash's tokenization with
special tokens added and parsed). create_embedding does not normalise; the fixture keeps the raw mean
(`embedding`) and the test compares it with kvstash's /v1/embeddings at embd_normalize -1 (none).
llama.cpp's matmuls quantize activations differently from kvstash's, so the test allows a small error.
"""
import argparse
import hashlib
import os
import platform
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import llama_cpp  # noqa: E402
import refutil  # noqa: E402

TEXTS = [
    "The capital of France is Paris.",
    "Embeddings turn text into vectors; similar texts get similar vectors.",
    "héllo wörld 123",
]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=os.environ.get("KVSTASH_MODEL") or
                    os.path.join(refutil.REPO_ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf"))
    args = ap.parse_args()
    with open(args.model, "rb") as f:
        sha = hashlib.sha256(f.read()).hexdigest()
    llm = llama_cpp.Llama(model_path=args.model, embedding=True, n_ctx=256, n_batch=256, n_threads=2,
                          pooling_type=llama_cpp.LLAMA_POOLING_TYPE_MEAN, verbose=False)
    cases = []
    for text in TEXTS:
        tokens = llm.tokenize(text.encode("utf-8"), add_bos=True, special=False)
        emb = llm.create_embedding(text)["data"][0]["embedding"]
        cases.append({"text": text, "tokens": tokens, "embedding": refutil.f32_list(emb)})
    refutil.write_json(os.path.join(refutil.FIXTURES, "smollm2", "embeddings.json"), {
        "generator": refutil.generator(__file__),
        "command": refutil.command_line(),
        "versions": {"python": platform.python_version(), "llama_cpp_python": llama_cpp.__version__},
        "model_sha256": sha,
        "method": __doc__.split("Method: ", 1)[1].strip(),
        "cases": cases,
    })


if __name__ == "__main__":
    main()
