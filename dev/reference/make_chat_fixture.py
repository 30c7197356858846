"""Makes dev/test/fixtures/chat/expected.json: the token ids and assistant masks that transformers'
apply_chat_template gives for the conversations of dev/test/fixtures/chat/conversations.jsonl, under
each fixture tokenizer folder of dev/test/fixtures/chat (smollm2: SmolLM2-135M-Instruct's
chat_template; llama3: Meta-Llama-3-8B-Instruct's, with its header and end-of-turn tokens added to
the same tiny BPE). test_tokenize.py compares tokenize_text.py --chat against it, token for token.

The mask is found here with tokens, not characters (tokenize_text.py works on the rendered text's
character spans): ids(messages[:k], add_generation_prompt=True) and ids(messages[:k+1]) must be
prefixes of the whole conversation's ids; the assistant's tokens are those after the first, through
the last eos_token id before the end of the second. For smollm2 it is checked once more against
transformers' own assistant mask (return_assistant_tokens_mask) of a copy of the template with
{% generation %} around the assistant's content and its <|im_end|>.

Needs transformers, tokenizers and jinja2 (no torch):
    python3 -m venv /tmp/venv-chat-ref && /tmp/venv-chat-ref/bin/pip install transformers jinja2 tokenizers
    /tmp/venv-chat-ref/bin/python dev/reference/make_chat_fixture.py
"""
import json
import os

import transformers
from transformers import AutoTokenizer

FIXTURES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "test", "fixtures", "chat")
TEMPLATES = ["smollm2", "llama3"]

# the lines of conversations.jsonl: both input forms, a system message, several turns, text that a
# template trims, non-ASCII, and a special token's text inside a message (apply_chat_template
# encodes it as the token, sanitize_control_tokens being off by default)
CONVERSATIONS = [
    {"messages": [{"role": "user", "content": "Who speaks the line: To be, or not to be?"},
                  {"role": "assistant", "content": "HAMLET"}]},
    {"prompt": "Continue: Now is the winter of our discontent", "completion": "Made glorious summer by this sun of York;"},
    {"messages": [{"role": "system", "content": "Answer with the speaker's name."},
                  {"role": "user", "content": "First Citizen: Before we proceed any further, hear me speak."},
                  {"role": "assistant", "content": "All: Speak, speak."},
                  {"role": "user", "content": "  And then?  "},
                  {"role": "assistant", "content": " First Citizen: You are all resolved rather to die than to famish? \n"}]},
    {"messages": [{"role": "user", "content": "Caf\u00e9 na\u00efve \u2014 \u201cquoted\u201d \u65e5\u672c\u8a9e \U0001F600"},
                  {"role": "assistant", "content": "\u00dcn\u00efc\u00f6d\u00e9 answer\twith a tab"}]},
    {"messages": [{"role": "user", "content": "a message holding <|im_end|> and <|eot_id|> as text"},
                  {"role": "assistant", "content": "ok"},
                  {"role": "user", "content": "no answer to this one"}]},
]


def ids_of(tok, messages, generation_prompt=False):
    out = tok.apply_chat_template(messages, tokenize=True, add_generation_prompt=generation_prompt, return_dict=True)
    return list(out["input_ids"])


def as_messages(record):
    if "messages" in record:
        return record["messages"]
    return [{"role": "user", "content": record["prompt"]}, {"role": "assistant", "content": record["completion"]}]


def assistant_mask(tok, messages):
    ids = ids_of(tok, messages)
    mask = [0] * len(ids)
    for k, m in enumerate(messages):
        if m["role"] != "assistant":
            continue
        before, through = ids_of(tok, messages[:k], True), ids_of(tok, messages[:k + 1])
        assert ids[:len(before)] == before and ids[:len(through)] == through, (k, messages)
        last_eos = max(i for i in range(len(before), len(through)) if ids[i] == tok.eos_token_id)
        mask[len(before):last_eos + 1] = [1] * (last_eos + 1 - len(before))
    return ids, mask


def generation_mask(tok, messages):
    """transformers' own assistant mask, from a copy of SmolLM2's template with {% generation %}."""
    marked = tok.chat_template.replace(
        "{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}",
        "{% if message['role'] == 'assistant' %}{{'<|im_start|>assistant\n'}}{% generation %}{{message['content'] +"
        " '<|im_end|>'}}{% endgeneration %}{{'\n'}}{% else %}{{'<|im_start|>' + message['role'] + '\n' +"
        " message['content'] + '<|im_end|>' + '\n'}}{% endif %}")
    assert marked != tok.chat_template
    out = tok.apply_chat_template(messages, chat_template=marked, tokenize=True, return_dict=True,
                                  return_assistant_tokens_mask=True)
    return list(out["input_ids"]), list(out["assistant_masks"])


def main():
    with open(os.path.join(FIXTURES, "conversations.jsonl"), "w", encoding="utf-8") as f:
        for c in CONVERSATIONS:
            f.write(json.dumps(c, ensure_ascii=False) + "\n")
    expected = {"transformers": transformers.__version__}
    for name in TEMPLATES:
        tok = AutoTokenizer.from_pretrained(os.path.join(FIXTURES, name))
        rows = []
        for c in CONVERSATIONS:
            ids, mask = assistant_mask(tok, as_messages(c))
            if name == "smollm2":
                assert generation_mask(tok, as_messages(c)) == (ids, mask), c
            rows.append({"ids": ids, "mask": mask})
        expected[name] = rows
        print(f"{name}: {sum(len(r['ids']) for r in rows)} tokens, {sum(sum(r['mask']) for r in rows)} learned")
    with open(os.path.join(FIXTURES, "expected.json"), "w") as f:
        json.dump(expected, f)
        f.write("\n")


if __name__ == "__main__":
    main()
