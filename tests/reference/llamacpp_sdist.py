"""llama.cpp's own Hugging Face -> GGUF converter, taken from the llama-cpp-python 0.3.36 sdist on PyPI.

The same source package, checksum and override as scripts/fetch_vocabs.sh: the sdist is downloaded with
pip (or taken from $KVSTASH_VOCAB_SDIST=/path/llama_cpp_python-0.3.36.tar.gz), its sha256 is checked,
and only the converter (convert_hf_to_gguf.py, conversion/, gguf-py/) is extracted into a temporary
folder. Nothing of it is committed.

run_converter() runs the converter in a subprocess (so its bundled gguf-py never meets the installed
gguf package used to read the result) with one in-process patch: TextModel.get_vocab_base_pre returns a
fixed pre-tokenizer name. The converter identifies a BPE tokenizer by hashing the ids it gives for a
fixed text and refuses hashes it does not know; a freshly trained test tokenizer has no known hash.
"""
import hashlib
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile

SDIST = "llama_cpp_python-0.3.36.tar.gz"
SDIST_SHA256 = "832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e"
PREFIX = "llama_cpp_python-0.3.36/vendor/llama.cpp/"
MEMBERS = ("convert_hf_to_gguf.py", "convert_lora_to_gguf.py", "conversion/", "gguf-py/")

_WRAPPER = r"""
import sys
root, pre = sys.argv[1], sys.argv[2]
sys.path.insert(0, root + "/gguf-py")
sys.path.insert(0, root)
import conversion.base
conversion.base.TextModel.get_vocab_base_pre = lambda self, tokenizer: pre
import convert_hf_to_gguf
sys.argv = ["convert_hf_to_gguf.py"] + sys.argv[3:]
convert_hf_to_gguf.main()
"""


def _sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


class Converter:
    """Context manager: extracts the converter on enter, removes it on exit. `.root` is the llama.cpp dir."""

    def __enter__(self):
        self._tmp = tempfile.mkdtemp(prefix="kvstash_llamacpp_converter_")
        src = os.environ.get("KVSTASH_VOCAB_SDIST")
        if src:
            sdist = src
        else:
            print("==> downloading llama.cpp's converter (llama-cpp-python==0.3.36 sdist from PyPI)", file=sys.stderr)
            subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--no-binary", ":all:",
                            "--disable-pip-version-check", "-d", self._tmp, "llama-cpp-python==0.3.36"], check=True)
            sdist = os.path.join(self._tmp, SDIST)
        digest = _sha256(sdist)
        if digest != SDIST_SHA256:
            raise SystemExit(f"sha256 of {sdist} is {digest}, expected {SDIST_SHA256}; refusing to use it")
        with tarfile.open(sdist, "r:gz") as tar:
            names = [m for m in tar.getmembers()
                     if any(m.name == PREFIX + p or (p.endswith("/") and m.name.startswith(PREFIX + p))
                            for p in MEMBERS)]
            tar.extractall(self._tmp, members=names, filter="data")
        self.root = os.path.join(self._tmp, PREFIX)
        self.sdist_sha256 = digest
        return self

    def __exit__(self, *exc):
        shutil.rmtree(self._tmp, ignore_errors=True)
        return False

    def convert(self, model_dir: str, outfile: str, outtype: str, pre_tokenizer: str = "gpt-2") -> str:
        """Runs `convert_hf_to_gguf.py model_dir --outfile outfile --outtype outtype`; returns its log."""
        cmd = [sys.executable, "-c", _WRAPPER, self.root, pre_tokenizer, model_dir, "--outfile", outfile,
               "--outtype", outtype]
        proc = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "HF_HUB_OFFLINE": "1"})
        if proc.returncode != 0:
            raise SystemExit(f"converter failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
        return proc.stdout + proc.stderr

    def convert_lora(self, lora_dir: str, base_dir: str, outfile: str, outtype: str = "f32") -> str:
        """Runs `convert_lora_to_gguf.py lora_dir --base base_dir --outfile outfile --outtype outtype`."""
        wrapper = ("import sys; root = sys.argv[1]; sys.path.insert(0, root + '/gguf-py'); sys.path.insert(0, root); "
                   "import runpy; sys.argv = ['convert_lora_to_gguf.py'] + sys.argv[2:]; "
                   "runpy.run_path(root + '/convert_lora_to_gguf.py', run_name='__main__')")
        cmd = [sys.executable, "-c", wrapper, self.root, lora_dir, "--base", base_dir, "--outfile", outfile,
               "--outtype", outtype]
        proc = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "HF_HUB_OFFLINE": "1"})
        if proc.returncode != 0:
            raise SystemExit(f"LoRA converter failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
        return proc.stdout + proc.stderr
