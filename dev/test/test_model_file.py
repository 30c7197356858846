"""CPU checks of the model file's checksum in llama_fp8/model_file.py and of dev/data/upgrade_model_file.c
(built here with gcc); llmc/model_file.h's side is in dev/test/test_checkpoint_host.cu.

- version 3, as write_model_file writes it: the stored checksum is zlib's CRC-32 of the header (its
  checksum words as 0) and the weights; the run id in words 252 (low) and 253 (high), 0 by default;
  a byte changed in any header word (magic, version, the shape, rope_theta, eps, the step, max_T, the
  run id, an unused word) is refused; hf_export of a file with a changed
  rope_theta exits 1 with `error: <file>: checksum mismatch ...` and writes nothing (issue 29 item 4);
- version 2 (the CRC-32 of the weights alone, made here without write_model_file) reads, with a
  notice on stderr; a changed weight in it is refused;
- version 1 (FNV-1a 64) is refused, naming the tool; the tool rewrites version 1 and 2 files as
  version 3 with the same config, step and weights; it refuses a corrupt file, an existing output and
  a version-3 input, leaving nothing behind.

Needs gcc and numpy (hf_export: safetensors, ml_dtypes, tqdm). Last line: "N passed, M failed".

    python3 dev/test/test_model_file.py
"""
import contextlib
import io
import os
import shutil
import subprocess
import sys
import tempfile
import zlib

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPTS = os.path.join(ROOT, "scripts")

from checks import check, summary  # dev/test/checks.py

import numpy as np  # noqa: E402
from llama_fp8 import model_file  # noqa: E402
from llama_fp8.model_file import FormatError  # noqa: E402

# The words with a meaning (magic, version, V L C NH NKV FF, step, rope_theta, eps, tied, RoPE scaling
# and its four parameters, max_T, the run id's two words) and unused ones.
HEADER_WORDS = list(range(18)) + [18, 100, 252, 253]
# The words no config check can judge: only the checksum refuses a change in them.
ONLY_CHECKSUM = {"rope_theta": 9, "norm eps": 10, "step": model_file.HDR_STEP, "max_T": model_file.HDR_MAX_T, "unused word 100": 100}


def fnv1a64(data, h=0xcbf29ce484222325):
    """FNV-1a 64 of version-1 files (pure Python: for the small test files only)."""
    for b in data:
        h = ((h ^ b) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    return h


def small_model():
    c = model_file.new_config(V=64, L=2, C=16, NH=2, NKV=1, FF=32, rope_theta=10000.0, norm_eps=1e-5, max_T=32)
    rng = np.random.default_rng(0)
    return c, {name: rng.standard_normal(shape).astype(np.float32) for name, shape in model_file.param_shapes(c)}


def read_bytes(path):
    with open(path, "rb") as f:
        return f.read()


def write_bytes(path, data):
    with open(path, "wb") as f:
        f.write(data)


def refused(path, want, what):
    """read_model_file(path) must raise a FormatError naming the file, its problem containing want."""
    try:
        with contextlib.redirect_stderr(io.StringIO()):
            model_file.read_model_file(path)
    except FormatError as e:
        return check(e.path == path and want in e.problem, f"{what}: refused: {e.problem}")
    return check(False, f"{what}: accepted")


def same_model(path, c, step, tensors):
    """Whether path reads back as (c, step, tensors); a file the reader refuses is not the same model."""
    try:
        c2, step2, t2 = model_file.read_model_file(path)
    except FormatError:
        return False
    return c2 == c and step2 == step and t2.keys() == tensors.keys() and all(np.array_equal(t2[n], tensors[n]) for n in tensors)


def legacy_file(path, v3_path, version):
    """A version-2 or version-1 file of the weights of v3_path, built here: the version word, and the
    CRC-32 (version 2) or FNV-1a (version 1) of the weights alone; version 1 had words 11-17 zero
    (untied, unscaled, the context unknown)."""
    data = read_bytes(v3_path)
    h = np.frombuffer(data[:model_file.HEADER_BYTES], dtype="<i4").copy()
    body = data[model_file.HEADER_BYTES:]
    h[1] = version
    if version == 1:
        h[11:18] = 0
    h[model_file.HDR_CHECKSUM:] = np.array([zlib.crc32(body) if version == 2 else fnv1a64(body)], dtype="<u8").view("<i4")
    write_bytes(path, h.tobytes() + body)


def test_version3(tmp):
    c, tensors = small_model()
    good = os.path.join(tmp, "model.bin")
    model_file.write_model_file(good, c, tensors.items(), step=1234, run_id=0x89ABCDEF01234567)
    data = read_bytes(good)
    h = np.frombuffer(data[:model_file.HEADER_BYTES], dtype="<i4").copy()
    stored = int(h[model_file.HDR_CHECKSUM:].view("<u8")[0])
    h[model_file.HDR_CHECKSUM:] = 0
    want = zlib.crc32(data[model_file.HEADER_BYTES:], zlib.crc32(h.tobytes()))
    check(h[1] == 3 and stored == want, f"version 3: the stored checksum {stored:#x} is zlib's CRC-32 of the header and weights {want:#x}")
    check(same_model(good, c, 1234, tensors), "version 3: read back with the same config, step and weights")
    # the run id in words 252 (low) and 253 (high), as llmc/model_file.h's header_run_id reads it
    check(int(h[252]) == 0x01234567 and int(h[253]) == -0x76543211, f"version 3: run id 0x89abcdef01234567 in words 252, 253 as"
                                                                    f" {int(h[252]):#x}, {int(h[253]):#x} (want 0x1234567 and 0x89abcdef as int32)")
    plain = os.path.join(tmp, "plain.bin")
    model_file.write_model_file(plain, c, tensors.items())
    hp = np.frombuffer(read_bytes(plain)[:model_file.HEADER_BYTES], dtype="<i4")
    check(hp[252] == 0 and hp[253] == 0, f"version 3 with no run: words 252, 253 are {hp[252]}, {hp[253]} (want 0: no run)")
    bad = os.path.join(tmp, "bad.bin")
    missed = []
    for word in HEADER_WORDS:
        for byte in (0, 3):  # the lowest byte (a small change) and the highest
            b = bytearray(data)
            b[4 * word + byte] ^= 0x01
            write_bytes(bad, bytes(b))
            try:
                with contextlib.redirect_stderr(io.StringIO()):
                    model_file.read_model_file(bad)
                missed.append(f"word {word} byte {byte}")
            except FormatError:
                pass
    check(not missed, f"version 3: a byte changed in any of {len(HEADER_WORDS)} header words, low or high byte, refused"
                      f"{': accepted ' + ', '.join(missed) if missed else ''}")
    for name, word in ONLY_CHECKSUM.items():
        b = bytearray(data)
        b[4 * word] ^= 0x01
        write_bytes(bad, bytes(b))
        refused(bad, "checksum mismatch", f"version 3: {name} changed")


def test_export_refuses_changed_rope_theta(tmp):
    """The issue's case: one changed byte in rope_theta exported with exit 0 and a wrong config.json."""
    c, tensors = small_model()
    path, out = os.path.join(tmp, "theta.bin"), os.path.join(tmp, "theta_hf")
    model_file.write_model_file(path, c, tensors.items())
    b = bytearray(read_bytes(path))
    b[4 * 9 + 1] ^= 0x10
    write_bytes(path, bytes(b))
    r = subprocess.run([sys.executable, os.path.join(SCRIPTS, "hf_export.py"), path, out], capture_output=True, text=True)
    check(r.returncode == 1 and r.stderr.startswith(f"error: {path}: checksum mismatch") and "Traceback" not in r.stderr
          and not os.path.exists(out), f"hf_export of a file with a changed rope_theta: exit {r.returncode}, {r.stderr.strip()}, nothing written")


def test_version2(tmp):
    c, tensors = small_model()
    v3, v2 = os.path.join(tmp, "for_v2.bin"), os.path.join(tmp, "v2.bin")
    model_file.write_model_file(v3, c, tensors.items(), step=5)
    legacy_file(v2, v3, 2)
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        ok = same_model(v2, c, 5, tensors)
    check(ok, "version 2: reads with the same config, step and weights")
    check(err.getvalue().startswith(f"notice: {v2}: a version-2 model file: its checksum covers the weights, not the header")
          and "upgrade_model_file" in err.getvalue() and err.getvalue().count("\n") == 1, f"version 2: one notice line: {err.getvalue().strip()}")
    b = bytearray(read_bytes(v2))
    b[model_file.HEADER_BYTES + 40] ^= 0x01
    write_bytes(v2, bytes(b))
    refused(v2, "checksum mismatch", "version 2: a changed weight")


def test_upgrade_tool(tmp):
    exe = os.path.join(tmp, "upgrade_model_file")
    build = subprocess.run(["gcc", "-O2", "-Wall", "-Wno-unused-function", "-I.", "dev/data/upgrade_model_file.c", "-lz", "-o", exe],
                           cwd=ROOT, capture_output=True, text=True)
    if not check(build.returncode == 0 and not build.stderr, f"build dev/data/upgrade_model_file.c{build.stderr}"):
        return
    c, tensors = small_model()
    v3 = os.path.join(tmp, "src.bin")
    model_file.write_model_file(v3, c, tensors.items(), step=77)
    for version in (1, 2):
        old, new = os.path.join(tmp, f"v{version}.bin"), os.path.join(tmp, f"v{version}_upgraded.bin")
        legacy_file(old, v3, version)
        if version == 1:
            refused(old, "upgrade_model_file", "version 1: refused, naming the tool that rewrites it")
        r = subprocess.run([exe, old, new], capture_output=True, text=True)
        if version == 2:
            ok = read_bytes(new) == read_bytes(v3)
            what = "byte for byte what write_model_file writes"
        else:
            ok = same_model(new, dict(c, max_T=0), 77, tensors)
            what = "the same config (context unknown), step and weights"
        check(r.returncode == 0 and ok, f"upgrade of a version-{version} file: version 3, {what} ({r.stdout.strip()}{r.stderr.strip()})")
    corrupt, out = os.path.join(tmp, "corrupt_v1.bin"), os.path.join(tmp, "corrupt_upgraded.bin")
    legacy_file(corrupt, v3, 1)
    b = bytearray(read_bytes(corrupt))
    b[model_file.HEADER_BYTES + 100] ^= 0x01
    write_bytes(corrupt, bytes(b))
    cut, existing = os.path.join(tmp, "cut.bin"), os.path.join(tmp, "v2_upgraded.bin")
    write_bytes(cut, read_bytes(os.path.join(tmp, "v1.bin"))[:-4])
    cases = [("a corrupt version-1 file", corrupt, out, f"{corrupt}: checksum mismatch"),
             ("an existing output", os.path.join(tmp, "v1.bin"), existing, f"{existing}: exists"),
             ("a version-3 file", v3, out, f"{v3}: already version 3"),
             ("a truncated file", cut, out, f"{cut}: 27964 bytes, but the config in its header needs 27968: truncated or corrupt")]
    for what, src, dst, want in cases:
        before = read_bytes(dst) if os.path.exists(dst) else None
        r = subprocess.run([exe, src, dst], capture_output=True, text=True)
        after = read_bytes(dst) if os.path.exists(dst) else None
        check(r.returncode == 1 and want in r.stderr and after == before and not os.path.exists(dst + ".tmp"),
              f"upgrade of {what}: refused, nothing written: {r.stderr.strip()}")


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as tmp:
        for test in (test_version3, test_export_refuses_changed_rope_theta, test_version2, test_upgrade_tool):
            test(tmp)
    sys.exit(summary())
