"""The C reference's masked loss (dev/test/llama_ref.h: targets -1 not learned, the step's loss the
mean over all its micro-batches' learned targets) against transformers' on a committed fixture
(dev/test/fixtures/masked_loss, made by dev/reference/make_masked_loss_fixture.py from the gqa Hugging
Face fixture): transformers' loss with labels -100 for each micro-batch, and its gradient-accumulation
rule (num_items_in_batch) for the step's loss and gradient, two micro-batches of unequal learned counts
(21 and 5), so the mean of the micro-batches' means is not the step's loss. The model is imported with
scripts/hf_import.py; the gradient too, written as a model whose weights are transformers' gradients
(the import only moves and permutes rows, which it does to a gradient as to the weight it belongs to).
Also llama_fp8/formats.py's loss-mask writer and reader: its constants are llmc/dataloader.h's, a mask
reads back, and every bad mask is refused naming the file.

    python3 dev/test/test_masked_loss.py

Needs numpy, safetensors, ml_dtypes, tokenizers, tqdm (hf_import.py's) and gcc.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPTS = os.path.join(ROOT, "scripts")
FIXTURE = os.path.join(ROOT, "dev", "test", "fixtures", "masked_loss")
MODEL = os.path.join(ROOT, "dev", "test", "fixtures", "hf", "gqa")

from checks import check, summary

try:
    import numpy as np
except ImportError as e:
    check(False, f"Python packages: {e}; install with: pip install numpy safetensors ml_dtypes tokenizers tqdm")
    sys.exit(summary())

from llama_fp8 import formats, model_file  # noqa: E402

# Both sides compute in fp32 from the same weights, as dev/test/test_hf.py's logits (1e-5 of the
# largest logit there); the loss is a mean of such values and the gradient a sum of products of them:
# the same bar, 1e-5 relative (of the loss; of each tensor's largest gradient). The mean of means this
# step would give instead is 0.8% off the step's loss, and it weighs micro-batch 1's 5 targets 3.2
# times more than the step's mean does (26 / (2 * 5) against 26 / (2 * 21) for the other's).
TOL = 1e-5


def run(cmd):
    p = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    if p.returncode != 0:
        print(f"    {' '.join(cmd)}: exit {p.returncode}\n{p.stdout}{p.stderr}")
    return p.returncode == 0


def test_mask_format(tmp):
    with open(os.path.join(ROOT, "llmc", "dataloader.h")) as f:
        header = f.read()
    for name, value in (("MASK_MAGIC", formats.MASK_MAGIC), ("MASK_VERSION", formats.MASK_VERSION),
                        ("MASK_SUFFIX", f'"{formats.MASK_SUFFIX}"')):
        check(f"#define {name} {value}\n" in header, f"formats.{name} = {value} is llmc/dataloader.h's")
    shard = os.path.join(tmp, "chat_000.bin")
    path = formats.mask_path(shard)
    check(path == shard + ".mask", f"the mask of {shard} is {path}")
    mask = (np.arange(1001) % 3 != 0).astype(np.uint8)
    formats.write_loss_mask(path, mask)
    check(np.array_equal(formats.read_loss_mask(path, tokens=1001), mask), "a loss mask reads back")
    check(os.path.getsize(path) == 1024 + 1001, f"a mask of 1001 tokens is {os.path.getsize(path)} bytes")

    def refused(what, fn, needle):
        try:
            fn()
        except formats.FormatError as e:
            check(needle in str(e) and e.path in str(e), f"{what}: refused: {e}")
            return
        check(False, f"{what}: accepted")
    refused("a value 2 written", lambda: formats.write_loss_mask(os.path.join(tmp, "bad.mask"), [0, 1, 2]), "must be 0 or 1")
    check(not os.path.exists(os.path.join(tmp, "bad.mask")), "a refused write leaves no file")
    refused("another token count", lambda: formats.read_loss_mask(path, tokens=1000), "a mask of 1001 tokens, its shard has 1000")
    data = bytearray(open(path, "rb").read())
    for what, edit, needle in (("a token shard's magic", lambda d: d.__setitem__(slice(0, 4), np.int32(20240520).tobytes()), "bad magic"),
                               ("version 2", lambda d: d.__setitem__(slice(4, 8), np.int32(2).tobytes()), "version 2"),
                               ("a truncated body", lambda d: d.__delitem__(slice(-5, None)), "the file has 996 mask bytes"),
                               ("a byte 7", lambda d: d.__setitem__(1024 + 40, 7), "byte 7 at token 40")):
        bad = bytearray(data)
        edit(bad)
        with open(os.path.join(tmp, "bad.mask"), "wb") as f:
            f.write(bad)
        refused(what, lambda: formats.read_loss_mask(os.path.join(tmp, "bad.mask")), needle)


def main():
    tmp = tempfile.mkdtemp(prefix="test_masked_loss_")
    test_mask_format(tmp)
    tool = os.path.join(tmp, "ref_masked_loss")
    if not check(run(["gcc", "-O2", "-Wall", "-Wno-unused-function", "-I.", "dev/test/tools/ref_masked_loss.c", "-lm", "-o", tool]),
                 "build dev/test/tools/ref_masked_loss.c"):
        sys.exit(summary())
    with open(os.path.join(FIXTURE, "expected.json")) as f:
        want = json.load(f)
    tokens, labels = np.load(os.path.join(FIXTURE, "tokens.npy")), np.load(os.path.join(FIXTURE, "labels.npy"))
    K, B, T1 = tokens.shape
    # the trainer's pairing: inputs = tokens 0..T-1, target t = token t+1, -1 where labels[t+1] is -100
    inputs = tokens[:, :, :-1]
    targets = np.where(labels[:, :, 1:] == -100, -1, tokens[:, :, 1:])
    inputs.astype("<i4").tofile(os.path.join(tmp, "inputs.i32"))
    targets.astype("<i4").tofile(os.path.join(tmp, "targets.i32"))
    check(int((targets >= 0).sum()) == sum(want["learned"]), f"the fixture's learned targets: {want['learned']}")

    model, grads_model = os.path.join(tmp, "gqa.bin"), os.path.join(tmp, "gqa_grads.bin")
    grads_folder = os.path.join(tmp, "grads_hf")
    os.makedirs(grads_folder)
    shutil.copy(os.path.join(MODEL, "config.json"), grads_folder)
    shutil.copy(os.path.join(FIXTURE, "grads.safetensors"), os.path.join(grads_folder, "model.safetensors"))
    ok = check(run([sys.executable, os.path.join(SCRIPTS, "hf_import.py"), MODEL, model]), "import the gqa fixture")
    ok &= check(run([sys.executable, os.path.join(SCRIPTS, "hf_import.py"), grads_folder, grads_model]),
                "import transformers' gradient as a model file")
    out = os.path.join(tmp, "out.f32")
    if ok and check(run([tool, model, os.path.join(tmp, "inputs.i32"), os.path.join(tmp, "targets.i32"), str(K), str(B), out]),
                    "run the C reference"):
        got = np.fromfile(out, dtype="<f4")
        step_loss, micro = float(got[0]), got[1:1 + K]
        err = abs(step_loss - want["step_loss"]) / abs(want["step_loss"])
        check(err < TOL, f"step loss {step_loss:.7f}, transformers' (num_items_in_batch) {want['step_loss']:.7f}: rel diff {err:.2g}"
                         f" (tol {TOL:g}; the mean of means would be {want['mean_of_means']:.7f})")
        for k in range(K):
            err = abs(micro[k] - want["micro_losses"][k]) / abs(want["micro_losses"][k])
            check(err < TOL, f"micro-batch {k}: mean over its {want['learned'][k]} learned targets {micro[k]:.7f}, transformers'"
                             f" (labels -100) {want['micro_losses'][k]:.7f}: rel diff {err:.2g}")
        c, _, hf = model_file.read_model_file(grads_model)
        grads = got[1 + K:]
        offset = 0
        for name, shape in model_file.param_shapes(c):
            n = int(np.prod(shape))
            mine, theirs = grads[offset:offset + n], np.asarray(hf[name]).reshape(-1)
            offset += n
            err = float(np.abs(mine - theirs).max() / np.abs(theirs).max())
            check(err < TOL, f"gradient {name}: max|diff|/max|transformers'| = {err:.2g} (tol {TOL:g})")
        check(offset == len(grads), f"the gradient holds {len(grads)} values, the tensors {offset}")
    shutil.rmtree(tmp, ignore_errors=True)
    sys.exit(summary())


if __name__ == "__main__":
    main()
