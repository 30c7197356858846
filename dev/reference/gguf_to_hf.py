"""Writes transformers' own Hugging Face folder of a GGUF file: the model, dequantized, and its
tokenizer, as transformers reads the GGUF (AutoModelForCausalLM / AutoTokenizer with gguf_file=).
scripts/hellaswag_check.sh scores this folder as the reference for our import of the same GGUF.

    python3 dev/reference/gguf_to_hf.py SmolLM2-135M-Instruct.Q4_1.gguf /tmp/hellaswag_check/hf

Needs torch, transformers and gguf.
"""
import argparse
import os

from transformers import AutoModelForCausalLM, AutoTokenizer


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("gguf", help="a GGUF file of the llama architecture")
    p.add_argument("out", help="the Hugging Face folder to write")
    args = p.parse_args()
    folder, name = os.path.split(os.path.abspath(args.gguf))
    AutoTokenizer.from_pretrained(folder, gguf_file=name).save_pretrained(args.out)
    AutoModelForCausalLM.from_pretrained(folder, gguf_file=name).save_pretrained(args.out)


if __name__ == "__main__":
    main()
