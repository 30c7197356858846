"""CPU checks of HellaSwag scoring: dev/data/prepare_hellaswag.py, the eval file (llama_fp8/formats.py's writer,
llmc/hellaswag.h's reader), the C reference scorer (dev/test/llama_ref.h) and the trainer's host side
(llmc/hellaswag.h: rows, truncation, per-position losses summed per ending, acc and acc_norm),
against transformers, and the val set's bytes for bits per byte (llmc/bpb.h).

- The fixture (dev/test/fixtures/hellaswag, made by dev/reference/make_hellaswag_fixture.py with
  transformers): 40 synthetic items in HellaSwag's 6-line layout and transformers' tokens and
  log-probabilities for them with the tied fixture model (a byte-level BPE tokenizer). Our script must
  write exactly transformers' tokens (lm-eval's context/continuation split, the ending after a space)
  and character lengths; the C reference scorer and the host side (through dev/test/tools/hellaswag_ref.c,
  the C reference model standing in for the GPU forward) must give every ending's log-probability
  within 1e-4 of transformers' and the same acc and acc_norm prediction on every item as lm-eval's rule
  (numpy argmax of the log-probabilities, and of them divided by the endings' characters), also with
  rows cut to T 32 as lm-eval cuts them.
- Exact ties: 12 fixture items rewritten so that the best ending (by acc, then by acc_norm) stands at
  2 or 4 positions (first and last included); the repeated rows score alike to the last digit and
  every tie goes to the first of the tied endings, as numpy's argmax (lm-eval) gives it.
- The official .jsonl with lm-eval's preprocessing, on a record whose expected text is written out here.
- .txt contexts ending in one or two spaces (one after non-ASCII text): split as lm-eval's _encode_pair
  (written out here) splits them; --bos starts every context with tokenizer_config.json's bos_token.
- ../shared/data/hellaswag's file, when it is there (never committed): its first items' labels.
- The README's HellaSwag commands read only what an earlier command writes (the items file the block
  downloads; hf_import.py's model file, decode table and tokenizer folder; the GGUF where the
  fine-tuning section unpacks it).
- Every bad input of the script (exit 1, `error: <file>: ...`, no traceback, no file left) and of the
  C reader (exit 1, the file named).
- Bits per byte: the bytes the trainer counts for a val batch's targets (llmc/bpb.h through
  dev/test/tools/text_bytes.c) equal the text's UTF-8 bytes, for SentencePiece-style pieces (a space
  prefix after BOS that the text does not have, a 0 byte token) and byte-level ones (a BOS that
  decodes as its name).

Needs gcc, numpy and tokenizers (not torch or transformers). Last line: "N passed, M failed".

    python3 dev/test/test_hellaswag.py
"""
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DATA = os.path.join(ROOT, "dev", "data")
FIXTURE = os.path.join(ROOT, "dev", "test", "fixtures", "hellaswag")
TIED = os.path.join(ROOT, "dev", "test", "fixtures", "hf", "tied")
SHARED = os.path.join(ROOT, "..", "shared", "data", "hellaswag", "hellaswag_val_full.txt.bz2")

from checks import check, summary  # dev/test/checks.py

try:
    import numpy as np
    import tokenizers  # noqa: F401 (prepare_hellaswag.py encodes with it)
except ImportError as e:
    check(False, f"Python packages: {e}; install with: pip install numpy tokenizers")
    sys.exit(summary())

from llama_fp8 import formats  # noqa: E402
from llama_fp8.model_file import hf_tokenizer_path, table_path  # noqa: E402

TMP = tempfile.mkdtemp(prefix="test_hellaswag_")
# transformers and the C reference both compute in fp32 from the same weights; a row's sum of ~20
# log-probabilities differs by their rounding, ~1e-5 (measured below); the bar the issue sets is 1e-4.
LOGPROB_TOL = 1e-4


def tmp(*parts):
    return os.path.join(TMP, *parts)


def run(args, **kw):
    p = subprocess.run([str(a) for a in args], capture_output=True, **kw)
    return p.returncode, p.stdout.decode("utf-8", "replace"), p.stderr.decode("utf-8", "replace")


def prepare(*args):
    return run([sys.executable, os.path.join(DATA, "prepare_hellaswag.py")] + list(args))


def build(tool):
    exe = tmp(tool)
    rc, out, err = run(["gcc", "-O2", "-Wall", "-Wno-unused-function", f"-I{ROOT}",
                        os.path.join(ROOT, "dev", "test", "tools", f"{tool}.c"), "-lm", "-lz", "-o", exe])
    if rc != 0:
        print(out + err)
    return exe if rc == 0 else None


def parse_scores(text):
    """hellaswag_ref's lines -> (ref logprobs (n, 4), host logprobs (n, 4), preds, pred_norms, summary)."""
    ref, host, pred, pred_norm, tail = [], [], [], [], None
    for line in text.splitlines():
        w = line.split()
        if w and w[0] == "item":
            ref.append([float(x) for x in w[5:9]])
            host.append([float(x) for x in w[10:14]])
            pred.append(int(w[15]))
            pred_norm.append(int(w[17]))
        elif w and w[0] == "acc":
            tail = (float(w[1]), float(w[3]), int(w[5]))
    return np.array(ref), np.array(host), np.array(pred), np.array(pred_norm), tail


def bad_input(what, args, out, name_in_error):
    """The script must exit 1 with `error: <name_in_error>: ...`, no traceback, and leave no output."""
    rc, stdout, stderr = prepare(*args)
    ok = rc == 1 and stderr.startswith(f"error: {name_in_error}:") and "Traceback" not in stderr and not os.path.exists(out)
    ok = ok and not [f for f in os.listdir(os.path.dirname(out)) if f.startswith(os.path.basename(out) + ".tmp")]
    check(ok, f"refused: {what} ({stderr.strip() or stdout.strip() or f'exit {rc}'})")


def write(name, text):
    with open(tmp(name), "w", encoding="utf-8") as f:
        f.write(text)
    return tmp(name)


def test_fixture(ref_tool):
    with open(os.path.join(FIXTURE, "expected.json")) as f:
        want = json.load(f)
    items = want["items"]
    out = tmp("fixture.bin")
    rc, stdout, stderr = prepare("--tokenizer", TIED, "--out", out, os.path.join(FIXTURE, "items.txt"))
    if not check(rc == 0, f"prepare_hellaswag.py on the fixture's items.txt ({(stdout + stderr).strip()})"):
        return
    got, vocab = formats.read_hellaswag(out)
    check(vocab == 300 and len(got) == len(items), f"eval file: {len(got)} items, vocabulary {vocab} (want {len(items)}, 300)")
    check(all(g[1] == w["context"] for g, w in zip(got, items)), "context tokens are transformers' (add_special_tokens=False)")
    bad = [i for i, (g, w) in enumerate(zip(got, items)) if g[2] != w["endings"]]
    check(not bad, f"ending tokens are transformers' continuation of ' ' + ending (lm-eval's split); items differing: {bad[:5]}")
    check(all(g[3] == w["chars"] and g[0] == w["label"] for g, w in zip(got, items)), "labels and endings' lengths in characters")
    rc2, _, _ = prepare("--tokenizer", TIED, "--out", tmp("again.bin"), os.path.join(FIXTURE, "items.txt"))
    with open(out, "rb") as a, open(tmp("again.bin"), "rb") as b:
        check(rc2 == 0 and a.read() == b.read(), "deterministic: a second run writes the same bytes")

    model = tmp("tied.bin")
    rc, o, e = run([sys.executable, os.path.join(ROOT, "scripts", "hf_import.py"), TIED, model])
    if not check(rc == 0, "the tied fixture imported by hf_import.py") or ref_tool is None:
        print(o + e)
        return
    lp = np.array([w["logprob"] for w in items])
    chars = np.array([w["chars"] for w in items])
    labels = np.array([w["label"] for w in items])
    want_pred, want_norm = lp.argmax(1), (lp / chars).argmax(1)
    # T 128 holds every row whole; B 3 puts an item's endings in different batches
    rc, o, e = run([ref_tool, model, out, 3, 128])
    if not check(rc == 0, f"hellaswag_ref B 3 T 128 ({e.strip()})"):
        return
    ref, host, pred, pred_norm, tail = parse_scores(o)
    check(ref.shape == lp.shape and np.abs(ref - lp).max() < LOGPROB_TOL,
          f"C reference scorer: every ending's log-probability within {LOGPROB_TOL} of transformers' (max diff {np.abs(ref - lp).max():.2e})")
    check(host.shape == lp.shape and np.abs(host - lp).max() < LOGPROB_TOL,
          f"trainer's host side (rows, losses per position): within {LOGPROB_TOL} of transformers' (max diff {np.abs(host - lp).max():.2e})")
    check(np.array_equal(pred, want_pred), f"acc predictions = transformers' argmax on every item ({np.sum(pred != want_pred)} differ)")
    check(np.array_equal(pred_norm, want_norm),
          f"acc_norm predictions = transformers' argmax of logprob / characters on every item ({np.sum(pred_norm != want_norm)} differ)")
    want_tail = (np.mean(want_pred == labels), np.mean(want_norm == labels), len(items))
    check(tail is not None and abs(tail[0] - want_tail[0]) < 1e-6 and abs(tail[1] - want_tail[1]) < 1e-6 and tail[2] == want_tail[2],
          f"acc {tail and tail[0]:.4f} acc_norm {tail and tail[1]:.4f} over {tail and tail[2]} items, transformers' {want_tail[0]:.4f} {want_tail[1]:.4f}")
    t = want["t_small"]
    rc, o, e = run([ref_tool, model, out, 4, t])
    _, host_t, _, _, _ = parse_scores(o)
    lp_t = np.array([w[f"logprob_T{t}"] for w in items])
    cut = sum(len(w["context"]) + len(x) > t + 1 for w in items for x in w["endings"])
    check(rc == 0 and host_t.shape == lp_t.shape and np.abs(host_t - lp_t).max() < LOGPROB_TOL and cut > 0,
          f"T {t}: {cut} rows cut from the left as lm-eval cuts them, all within {LOGPROB_TOL} of transformers'"
          f" (max diff {np.abs(host_t - lp_t).max() if host_t.shape == lp_t.shape else float('nan'):.2e})")
    rc, o, _ = run([ref_tool, model, out, 4, 128, 7])
    check(rc == 0 and parse_scores(o)[4][2] == 7, "MAX_ITEMS 7 reads the first 7 items")
    test_ties(ref_tool, model, items)
    test_reader_errors(ref_tool, model, out)


# where an item's best ending is repeated: every pair of positions, the first and the last among them, all four
TIE_LAYOUTS = [(0, 1), (0, 3), (1, 2), (2, 3), (1, 3), (0, 1, 2, 3)]


def test_ties(ref_tool, model, items):
    """Exact ties: fixture items rewritten so that the best ending (by acc in one item, by acc_norm in
    the next) stands at each layout's positions, the other endings after. A repeated ending is the
    same row, so the scorer's log-probabilities tie exactly; lm-eval's rule (numpy's argmax) gives a
    tie to the first of them. Transformers' log-probabilities of the fixture's endings move with them."""
    with open(os.path.join(FIXTURE, "items.txt"), encoding="utf-8") as f:
        lines = f.read().split("\n")
    text, lp, chars, tied = [], [], [], []
    for i, w in enumerate(items):
        if len(tied) == 2 * len(TIE_LAYOUTS):
            break
        layout, by_norm = TIE_LAYOUTS[len(tied) // 2], len(tied) % 2 == 1
        score = np.array(w["logprob"]) / (np.array(w["chars"]) if by_norm else 1)
        best = int(score.argmax())
        if np.sort(score)[-2] > score[best] - 1e-3:  # a clear best: the C scorer's 1e-5 from transformers cannot reorder it
            continue
        others = iter(k for k in range(4) if k != best)
        order = [best if k in layout else next(others) for k in range(4)]
        endings = lines[6 * i + 2:6 * i + 6]
        text += [lines[6 * i], lines[6 * i + 1]] + [endings[k] for k in order]
        lp.append([w["logprob"][k] for k in order])
        chars.append([w["chars"][k] for k in order])
        tied.append(layout)
    path, out = write("ties.txt", "\n".join(text) + "\n"), tmp("ties.bin")
    rc, o, e = prepare("--tokenizer", TIED, "--out", out, path)
    if not check(rc == 0 and len(tied) == 2 * len(TIE_LAYOUTS), f"{len(tied)} tie items written and prepared ({(o + e).strip()})"):
        return
    rc, o, e = run([ref_tool, model, out, 3, 128])
    _, _, pred, pred_norm, _ = parse_scores(o)
    host = [line.split()[10:14] for line in o.splitlines() if line.startswith("item ")]
    check(rc == 0 and len(host) == len(tied) and all(len({host[i][k] for k in t}) == 1 for i, t in enumerate(tied)),
          f"the repeated endings' log-probabilities are equal, to the last digit printed{f' ({e.strip()})' if rc else ''}")
    lp, chars = np.array(lp), np.array(chars)
    want, want_norm = lp.argmax(1), (lp / chars).argmax(1)
    check(all(want[i] == t[0] for i, t in enumerate(tied) if i % 2 == 0) and all(want_norm[i] == t[0] for i, t in enumerate(tied) if i % 2),
          "(numpy's argmax takes the first of the tied positions)")
    check(np.array_equal(pred, want), f"acc ties go to the first tied ending: predictions {pred.tolist()}, want {want.tolist()}")
    check(np.array_equal(pred_norm, want_norm),
          f"acc_norm ties go to the first tied ending: predictions {pred_norm.tolist()}, want {want_norm.tolist()}")


def test_reader_errors(ref_tool, model, good):
    with open(good, "rb") as f:
        data = bytearray(f.read())
    header = np.frombuffer(bytes(data[:1024]), dtype="<i4")
    first = 1024 // 4  # the first item's label, as an int32 index

    def doctored(name, fix):
        d = bytearray(data)
        fix(d)
        with open(tmp(name), "wb") as f:
            f.write(d)
        return tmp(name)

    def put(d, index, value):
        d[4 * index:4 * index + 4] = np.int32(value).tobytes()
    cases = [
        ("bad magic", doctored("magic.bin", lambda d: put(d, 0, 1234)), 128, "bad magic"),
        ("truncated", doctored("trunc.bin", lambda d: d.__delitem__(slice(len(d) - 8, None))), 128, "truncated"),
        ("trailing bytes", doctored("trail.bin", lambda d: d.extend(b"\0" * 8)), 128, "after its"),
        ("label 5", doctored("label.bin", lambda d: put(d, first, 5)), 128, "label 5"),
        ("a token outside the vocabulary", doctored("vocab.bin", lambda d: put(d, first + 10, 320)), 128, "outside the model's vocabulary"),
        ("an ending longer than T", good, 4, "more than the sequence length"),
        ("no items", doctored("empty.bin", lambda d: (put(d, 2, 0), d.__delitem__(slice(1024, None)))), 128, "no items"),
    ]
    check(header[2] == 40, "the eval file's header holds the item count")
    for what, path, T, message in cases:
        rc, o, e = run([ref_tool, model, path, 2, T])
        check(rc != 0 and path in e and message in e, f"C reader refuses {what}: {e.strip()[:150]}")


def test_jsonl():
    record = {"ind": 4, "activity_label": "Removing ice from car", "ctx_a": "Then, the man writes over the snow.",
              "ctx_b": "the MAN", "endings": [", the man adds wax [to] it.", " [title] Remove the snow. [step] Use a shovel.",
                                              "the man  stands [title] it.", "[header] a woman puts on gloves."],
              "label": 3, "split": "val"}
    # lm-eval's rules by hand: ctx_b capitalized (the rest lowercased), brackets removed, " [title]" -> ". ",
    # one double space made single, stripped
    query = "Removing ice from car: Then, the man writes over the snow. The man"
    endings = [", the man adds wax it.", " Remove the snow. Use a shovel.", "the man stands. it.", " a woman puts on gloves."]
    path = write("val.jsonl", json.dumps(record) + "\n" + json.dumps(dict(record, label="1")) + "\n")
    out = tmp("jsonl.bin")
    rc, o, e = prepare("--tokenizer", TIED, "--out", out, path)
    if not check(rc == 0, f"prepare_hellaswag.py on a hellaswag_val.jsonl record ({(o + e).strip()})"):
        return
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(os.path.join(TIED, "tokenizer.json"))
    enc = lambda s: tok.encode(s, add_special_tokens=False).ids  # noqa: E731
    got, _ = formats.read_hellaswag(out)
    ctx = enc(query)
    want = [enc(query + " " + x)[len(ctx):] for x in endings]
    check(got[0][1] == ctx and got[0][2] == want, "jsonl: lm-eval's preprocessing of the query and the endings")
    check(got[0][3] == [len(x) for x in endings] and [g[0] for g in got] == [3, 1], "jsonl: characters and labels (int or string)")


def encode_pair(enc, context, continuation):
    """lm-eval's _encode_pair: a context's trailing spaces move onto the continuation, whose tokens are
    what follows the context's in the encoding of the whole."""
    n = len(context) - len(context.rstrip())
    if n:
        context, continuation = context[:-n], context[-n:] + continuation
    ctx = enc(context)
    return ctx, enc(context + continuation)[len(ctx):]


def test_context_and_bos():
    """.txt contexts ending in spaces (one, two, after non-ASCII text) split as lm-eval splits them;
    --bos puts the tokenizer's BOS (tokenizer_config.json's bos_token, not its eos_token) first."""
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(os.path.join(TIED, "tokenizer.json"))
    enc = lambda s: tok.encode(s, add_special_tokens=False).ids  # noqa: E731
    items = [("Sewing: she threads the needle ", 1, ["and pulls it through.", "then eats it.", "a dog.", "b"]),
             ("Caf\u00e9 na\u00efve: the \u2603 melts  ", 3, ["slowly.", "\u65e5\u672c", "x y", "away in the sun."])]
    path = write("trailing.txt", "".join(f"{c}\n{l}\n" + "".join(e + "\n" for e in es) for c, l, es in items))
    out = tmp("trailing.bin")
    rc, o, e = prepare("--tokenizer", TIED, "--out", out, path)
    got = formats.read_hellaswag(out)[0] if rc == 0 else []
    want = [[encode_pair(enc, c, " " + x) for x in es] for c, _, es in items]
    check(len(got) == 2 and all(g[1] == w[0][0] and g[2] == [p[1] for p in w] for g, w in zip(got, want)),
          f"contexts ending in spaces: the spaces go to each ending's tokens, as lm-eval's _encode_pair ({(o + e).strip()})")
    check(enc(items[0][0]) != want[0][0][0], "(the tokenizer gives a context's trailing space a token of its own)")

    with open(os.path.join(TIED, "tokenizer_config.json")) as f:
        config = json.load(f)
    bos, eos = tok.token_to_id(config["bos_token"]), tok.token_to_id(config["eos_token"])
    out_bos = tmp("bos.bin")
    rc, o, e = prepare("--tokenizer", TIED, "--out", out_bos, "--bos", path)
    got_bos = formats.read_hellaswag(out_bos)[0] if rc == 0 else []
    check(len(got_bos) == 2 and bos != eos and all(b[1] == [bos] + g[1] and b[2] == g[2] for b, g in zip(got_bos, got)),
          f"--bos: every context starts with BOS {config['bos_token']} (id {bos}, not EOS id {eos}), the rest unchanged ({(o + e).strip()})")


def test_shared():
    if not os.path.exists(SHARED):
        print(f"not run: {SHARED} is not here (the real HellaSwag file; never committed)")
        return
    import bz2
    with bz2.open(SHARED, "rt", encoding="utf-8") as f:
        lines = [next(f).rstrip("\n") for _ in range(6 * 30)]
    out = tmp("shared.bin")
    rc, o, e = prepare("--tokenizer", TIED, "--out", out, "--max_items", 30, SHARED)
    got, _ = formats.read_hellaswag(out) if rc == 0 else ([], 0)
    check(rc == 0 and [g[0] for g in got] == [int(lines[6 * i + 1]) for i in range(30)],
          f"../shared's HellaSwag file, --max_items 30: 30 items with the file's labels ({(o + e).strip()})")
    check(all(g[3] == [len(x) for x in lines[6 * i + 2:6 * i + 6]] for i, g in enumerate(got)), "its endings' characters")


def test_readme():
    """The README's HellaSwag commands name only files an earlier command makes: the items file the
    block's own download writes, hf_import.py's model file, decode table and tokenizer folder of the
    fine-tuning section, and the GGUF where that section unpacks it."""
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        readme = f.read()
    section = lambda title: readme.split(title, 1)[-1].split("\n## ", 1)[0]  # noqa: E731
    block = section("## Evaluation: HellaSwag").split("```bash\n", 1)[-1].split("```", 1)[0]
    commands = [shlex.split(line, comments=True) for line in block.replace("\\\n", " ").splitlines()]
    made, items = [], None  # what the commands before write (-o, --out); what prepare_hellaswag.py reads
    for c in commands:
        if "dev/data/prepare_hellaswag.py" in c:
            items = c[-1]
            break
        made += [w for prev, w in zip(c, c[1:]) if prev in ("-o", "--out")]
    check(items is not None and items in made, f"README: prepare_hellaswag.py reads {items}, which an earlier command of the block writes ({made})")
    words = [w for c in commands for w in c]
    tune = section("## Fine-tune a Hugging Face model")
    imported = re.search(r"scripts/hf_import\.py (\S+) (\S+\.bin)", tune)
    model = imported.group(2) if imported else None
    init = words[words.index("-init_from") + 1] if "-init_from" in words else None
    tok = words[words.index("-tok") + 1] if "-tok" in words else None
    tokenizer = words[words.index("--tokenizer") + 1] if "--tokenizer" in words else None
    check(model is not None and (init, tok, tokenizer) == (model, table_path(model), os.path.basename(hf_tokenizer_path(model))),
          f"README: the HellaSwag commands' model {init}, decode table {tok} and tokenizer {tokenizer} are what hf_import.py"
          f" writes for the fine-tuning section's {model}")
    check_cmd = re.search(r"scripts/hellaswag_check\.sh (\S+)`", readme)
    check(imported is not None and check_cmd is not None and check_cmd.group(1) == imported.group(1),
          f"README: hellaswag_check.sh gets the GGUF where the fine-tuning section unpacks it"
          f" ({check_cmd and check_cmd.group(1)}, {imported and imported.group(1)})")


def test_bad_inputs():
    good = os.path.join(FIXTURE, "items.txt")
    with open(good, encoding="utf-8") as f:
        lines = f.read().split("\n")
    out = tmp("bad", "out.bin")
    os.makedirs(tmp("bad"))
    cases = [
        ("7 lines", write("seven.txt", "\n".join(lines[:7]) + "\n"), "seven.txt"),
        ("label 4", write("label4.txt", "\n".join(lines[:1] + ["4"] + lines[2:12]) + "\n"), "label4.txt"),
        ("label x", write("labelx.txt", "\n".join(lines[:1] + ["x"] + lines[2:12]) + "\n"), "labelx.txt"),
        ("an empty ending", write("empty.txt", "\n".join(lines[:3] + [" "] + lines[4:12]) + "\n"), "empty.txt"),
        ("a context line without 'label: '", write("ctx.txt", "\n".join(["no colon here"] + lines[1:12]) + "\n"), "ctx.txt"),
        ("no items", write("none.txt", ""), "none.txt"),
        ("not UTF-8", write("latin.txt", "") and tmp("latin.txt"), "latin.txt"),
        ("jsonl: not JSON", write("bad.jsonl", "{not json\n"), "bad.jsonl"),
        ("jsonl: no ctx_b", write("field.jsonl", json.dumps({"ctx_a": "a", "activity_label": "b", "endings": ["x"] * 4, "label": 0}) + "\n"), "field.jsonl"),
        ("jsonl: 3 endings", write("three.jsonl", json.dumps({"ctx_a": "a", "ctx_b": "b", "activity_label": "c", "endings": ["x"] * 3, "label": 0}) + "\n"), "three.jsonl"),
        ("jsonl: label 9", write("nine.jsonl", json.dumps({"ctx_a": "a", "ctx_b": "b", "activity_label": "c", "endings": ["x"] * 4, "label": 9}) + "\n"), "nine.jsonl"),
        ("another extension", write("items.csv", "a"), "items.csv"),
        ("a missing input", tmp("missing.txt"), "missing.txt"),
    ]
    with open(tmp("latin.txt"), "wb") as f:
        f.write(b"Caf\xe9: x\n0\na\nb\nc\nd\n")
    for what, path, name in cases:
        bad_input(what, ["--tokenizer", TIED, "--out", out, path], out, path if name in path else name)
    bad_input("a missing tokenizer", ["--tokenizer", tmp("nope"), "--out", out, good], out, tmp("nope"))
    with open(out, "wb") as f:
        f.write(b"keep me")
    rc, _, e = prepare("--tokenizer", TIED, "--out", out, good)
    with open(out, "rb") as f:
        check(rc == 1 and e.startswith(f"error: {out}: exists") and f.read() == b"keep me", f"an existing --out is kept without --force ({e.strip()})")
    rc, _, _ = prepare("--tokenizer", TIED, "--out", out, "--force", good)
    check(rc == 0 and formats.read_hellaswag(out)[0][0][0] == int(lines[1]), "--force replaces it")


def test_bytes(bytes_tool):
    """A val batch's target bytes = the text's bytes: a SentencePiece-style table (BOS decodes to
    nothing; a word's piece carries its space, so the first after BOS has a space the text lacks) and
    a byte-level one (BOS decodes to its name, which is no text)."""
    if bytes_tool is None:
        return
    # SentencePiece-style: 0 <unk>, 1 <s>, 2 </s>, " The", " cat", "\n", "\xc3\xa9" (é), "\x00"
    sp = [b"", b"", b"", b" The", b" cat", b"\n", "\u00e9".encode(), b"\x00"]
    docs_sp = [([3, 4, 5], "The cat\n"), ([3, 6, 7], "The\u00e9\x00"), ([4, 4], "cat cat")]
    # byte-level: 0 "<|endoftext|>" (the document start), "The", " cat", "!"
    bl = [b"<|endoftext|>", b"The", b" cat", b"!"]
    docs_bl = [([1, 2, 3], "The cat!"), ([2], " cat")]
    for name, pieces, bos, docs in (("SentencePiece-style", sp, 1, docs_sp), ("byte-level", bl, 0, docs_bl)):
        table = tmp(f"{name}.bin")
        formats.write_decode_table(table, pieces, bos)
        tokens = [t for ids, _ in docs for t in [bos] + ids]
        shard = tmp(f"{name}_tokens.bin")
        formats.write_shard(shard, np.array(tokens), "<u4")
        text_bytes = sum(len(text.encode("utf-8")) for _, text in docs)
        if name == "byte-level":
            text_bytes -= 1  # the second document's own leading space is taken for a tokenizer's prefix space
        rc, o, e = run([bytes_tool, table, shard])
        check(rc == 0 and o.split() == [str(text_bytes)], f"bpb bytes, {name}: {o.strip() or e.strip()} counted, the text has {text_bytes}")


def main():
    ref_tool, bytes_tool = build("hellaswag_ref"), build("text_bytes")
    check(ref_tool is not None and bytes_tool is not None, "dev/test/tools/hellaswag_ref.c and text_bytes.c build with gcc")
    test_fixture(ref_tool)
    test_jsonl()
    test_context_and_bos()
    test_shared()
    test_readme()
    test_bad_inputs()
    test_bytes(bytes_tool)
    sys.exit(summary())


if __name__ == "__main__":
    main()
