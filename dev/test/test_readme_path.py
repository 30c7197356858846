"""CPU walk of the README's fine-tuning path ("Fine-tune a Hugging Face model"), on the tiny tied
fixture (dev/test/fixtures/hf/tied: byte-level BPE tokenizer, tied embeddings) written as the GGUF
llama.cpp's converter would make of it, vocabulary, merges and pre-tokenizer included; no network, no
GPU (the training steps are left out: the import's own model file goes to the export):

- scripts/hf_import.py GGUF OUT.bin writes OUT_hf_tokenizer/ (tokenizer.json, tokenizer_config.json)
  beside the model file and the decode table, and that tokenizer encodes text exactly as the
  fixture's own tokenizer.json (the one the GGUF was made from) does, BOS and EOS named as the
  fixture's config names them;
- dev/data/shards_to_text.py turns the shipped TinyShakespeare val shard back into text and
  dev/data/tokenize_text.py --tokenizer OUT_hf_tokenizer tokenizes it: each document is the fixture
  tokenizer's encoding after the --bos_id;
- scripts/hf_export.py OUT.bin --tokenizer OUT_hf_tokenizer --special_tokens OUT_special_tokens.json
  gives back the fixture's weights bit for bit (an F32 GGUF), its BOS / EOS ids, and the tokenizer;
- the README's -x 0 evaluation of the imported model, with the import's files and val shard put in,
  passes the trainer's -check 1 (its default -i, the shipped Llama 2 shards, is not read at -x 0);
- the README's commands name the folder hf_import writes (smollm2_hf_tokenizer for smollm2.bin).
Last line: "N passed, N failed".

    python3 dev/test/test_readme_path.py
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from checks import check, summary  # dev/test/checks.py

try:
    import numpy as np
    import gguf
    from tokenizers import Tokenizer
except ImportError as e:
    check(False, f"Python packages: {e}; make test installs them (requirements.txt, into .venv/)")
    sys.exit(summary())
import test_hf  # noqa: E402  (its GGUF writer, as llama.cpp's converter writes a fixture)
from llama_fp8 import formats  # noqa: E402
from llama_fp8.model_file import hf_tokenizer_path  # noqa: E402

FIXTURE = os.path.join(ROOT, "dev", "test", "fixtures", "hf", "tied")
SHAKESPEARE = os.path.join(ROOT, "dev", "data", "tinyshakespeare")
VAL_TOKENS = 5000  # more than one batch of the README's -x 0 evaluation (B 4 x T 1024)
TEXTS = ["First Citizen:\nBefore we proceed any further, hear me speak.", "  two spaces, a tab\tand 12345 digits",
         "caf\u00e9 \u2603 \u65e5\u672c", "<|im_start|>user\nhi<|im_end|>"]


def run(script, *args):
    p = subprocess.run([sys.executable, os.path.join(ROOT, script)] + list(args), capture_output=True, text=True)
    if p.returncode != 0:
        print(f"    {script}: exit {p.returncode}\n{p.stdout}{p.stderr}")
    return p.returncode == 0, p.stdout


def tied_gguf(path):
    """The tied fixture as a GGUF whose tokenizer is its tokenizer.json's: tokens, types, merges, pre."""
    with open(os.path.join(FIXTURE, "tokenizer.json")) as f:
        merges = [m if isinstance(m, str) else " ".join(m) for m in json.load(f)["model"]["merges"]]

    def tokenizer_keys(w):
        w.add_token_merges(merges)
        w.add_tokenizer_pre("gpt-2")  # the fixture's pre-tokenizer: ByteLevel, GPT-2's regex
    return test_hf.write_gguf(path, "tied", edit=tokenizer_keys)


def main(tmp):
    src = tied_gguf(os.path.join(tmp, "tied.gguf"))
    out = os.path.join(tmp, "tied.bin")
    folder = hf_tokenizer_path(out)
    ok, stdout = run("scripts/hf_import.py", src, out)
    check(ok and os.path.isfile(os.path.join(folder, "tokenizer.json")) and os.path.isfile(os.path.join(folder, "tokenizer_config.json")),
          f"hf_import.py GGUF: writes {os.path.basename(folder)}/ with tokenizer.json and tokenizer_config.json ({stdout.strip()[-200:]!r})")
    if not os.path.isdir(folder):
        return
    ref, ours = Tokenizer.from_file(os.path.join(FIXTURE, "tokenizer.json")), Tokenizer.from_file(os.path.join(folder, "tokenizer.json"))
    for text in TEXTS:
        a, b = ref.encode(text).ids, ours.encode(text).ids
        check(a == b, f"the GGUF's tokenizer encodes {text!r} as the fixture's tokenizer.json ({len(a)} ids)"
                      + ("" if a == b else f": {b} (want {a})"))
    with open(os.path.join(FIXTURE, "config.json")) as f:
        config = json.load(f)
    bos, eos, _ = formats.special_ids(os.path.join(folder, "tokenizer.json"))
    check((bos, eos) == (config["bos_token_id"], config["eos_token_id"]),
          f"its tokenizer_config.json names BOS {bos}, EOS {eos} (the fixture's config: {config['bos_token_id']}, {config['eos_token_id']})")

    # the README's text: the shipped val shard back to text, then tokenized with the folder
    text = os.path.join(tmp, "tinyshakespeare.txt")
    ok, _ = run("dev/data/shards_to_text.py", "--table", os.path.join(SHAKESPEARE, "llama2_tokenizer.bin"), "--strip_prefix_space",
                "--out", text, os.path.join(SHAKESPEARE, "tinyshakespeare_llama2_val.bin"))
    check(ok, "shards_to_text.py: the shipped TinyShakespeare val shard back to text")
    if not ok:
        return
    data = os.path.join(tmp, "data")
    ok, _ = run("dev/data/tokenize_text.py", "--tokenizer", folder, "--out", data, "--name", "tinyshakespeare_tied", "--split", "para",
                "--val_tokens", str(VAL_TOKENS), "--bos_id", "0", text)
    val = os.path.join(data, "tinyshakespeare_tied_val.bin")
    check(ok and os.path.isfile(val), "tokenize_text.py --tokenizer OUT_hf_tokenizer: the val and train shards")
    if ok:
        docs = open(text, encoding="utf-8").read().split("\n\n")
        want = []
        for doc in docs:
            if len(want) >= VAL_TOKENS:
                break
            want += [0] + ref.encode(doc).ids
        got = formats.read_shard(val)
        check(np.array_equal(got, want), f"the val shard is the fixture tokenizer's encoding of the first paragraphs, each after id 0"
                                         f" ({len(got)} tokens, want {len(want)})")

    # the README's evaluation of the imported model (-x 0) with its names put in, checked by the trainer
    # (-check 1, no GPU): -x 0 reads no training data, so the default -i (Llama 2 shards) stays unread
    readme = open(os.path.join(ROOT, "README.md"), encoding="utf-8").read()
    section = readme.split("## Fine-tune a Hugging Face model", 1)[-1].split("\n## ", 1)[0]
    evals = [line for line in section.splitlines() if line.startswith("./train_llama_fp8 -init_from smollm2.bin") and " -x 0 " in line]
    check(len(evals) == 1, f"the README's fine-tuning section has one -x 0 evaluation of smollm2.bin ({len(evals)})")
    trainer = os.path.join(ROOT, "train_llama_fp8")
    if len(evals) == 1 and ok:
        names = {"smollm2.bin": out, "smollm2_tokenizer.bin": out[:-4] + "_tokenizer.bin", "data/tinyshakespeare_smollm2_val.bin": val}
        argv = [names.get(word, word) for word in evals[0].split()[1:]]
        p = subprocess.run([trainer] + argv + ["-check", "1"], cwd=ROOT, capture_output=True, text=True) if os.path.isfile(trainer) else None
        good = p is not None and p.returncode == 0 and "every input is good" in p.stdout
        why = "" if good else " (build the trainer first: make train_llama_fp8)" if p is None else \
            f": exit {p.returncode}, {(p.stdout + p.stderr).strip()[-300:]!r}"
        check(good, f"the README's -x 0 evaluation, {' '.join(evals[0].split()[1:])}, passes -check 1 with the import's files{why}")

    # the export, from the import's model file (the README's comes from the fine-tuned checkpoint)
    hf = os.path.join(tmp, "tied_hf")
    ok, _ = run("scripts/hf_export.py", out, hf, "--tokenizer", folder, "--special_tokens", out[:-4] + "_special_tokens.json",
                "--dtype", "fp32")
    check(ok, "hf_export.py OUT.bin --tokenizer OUT_hf_tokenizer --special_tokens OUT_special_tokens.json")
    if not ok:
        return
    want_w, got_w = test_hf.read_safetensors(os.path.join(FIXTURE, "model.safetensors")), test_hf.read_safetensors(os.path.join(hf, "model.safetensors"))
    same = sorted(want_w) == sorted(got_w) and all(np.array_equal(want_w[k].astype(np.float32), got_w[k]) for k in want_w)
    check(same, f"the export holds the fixture's {len(want_w)} tensors bit for bit")
    with open(os.path.join(hf, "config.json")) as f:
        exported = json.load(f)
    check((exported["bos_token_id"], exported["eos_token_id"]) == (config["bos_token_id"], config["eos_token_id"]),
          f"the export's config.json: BOS {exported['bos_token_id']}, EOS {exported['eos_token_id']}")
    check(open(os.path.join(hf, "tokenizer.json")).read() == open(os.path.join(folder, "tokenizer.json")).read(),
          "the export's tokenizer.json is the folder's")

    name = os.path.basename(hf_tokenizer_path("smollm2.bin"))
    named = set(re.findall(r"--tokenizer (\S+)", section))
    check(named == {name}, f"the README's fine-tuning commands tokenize and export with {name}, the folder hf_import.py writes"
                           f" for smollm2.bin (they name {sorted(named)})")


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as tmp:
        main(tmp)
    shutil.rmtree(test_hf.TMP, ignore_errors=True)
    sys.exit(summary())
