"""The project's shared Python: what the tools in dev/data/, scripts/ and dev/reference/ and the
suites in dev/test/ have in common, each format read and written in one place.

    formats      token shards, decode tables, loss masks, HellaSwag eval files, tokenizer loading,
                 required_packages (a missing package named, not a traceback), tool_main (a
                 tool's error exit)
    model_file   our model file (llmc/model_file.h is the C side) and the files beside it
    hf_layout    Hugging Face / GGUF tensor names against ours, RoPE's row order, where a Hugging
                 Face folder records its special token ids
    trainer_log  main.log, fp8.log and the trainer's standard output, read; fp8 health summaries
    model_flops  model FLOPs per token, as llmc/mfu.h counts them

The package sits at the repository root (pyproject.toml); make venv installs it into .venv/, editable,
so that a tool run by its path with that Python (.venv/bin/python3 scripts/hf_import.py ...) imports
it with no path set-up. Importing the package imports nothing: each module is imported by name, and
only formats may be imported before formats.required_packages().
"""
