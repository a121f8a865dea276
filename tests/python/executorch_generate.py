#!/usr/bin/env python3
"""Greedy generation by ExecuTorch's own LLM runner through anefit's backend.

Run with a Python that has torch and executorch, and this anefit package on
PYTHONPATH (conftest.executorch_python):

    executorch_generate.py PROGRAM.pte TOKENIZER.json PROMPT_ID N

writes a tokenizer for the program's vocabulary in which token i is two
letters (so every token prints as itself and its id can be read back), then
registers anefit as ExecuTorch's CoreMLBackend and lets TextLLMRunner
generate N tokens greedily after the one-token prompt PROMPT_ID. The runner
prints each token to standard output, then a "PyTorchObserver {...}" line.
"""
import json
import string
import sys

LETTERS = string.ascii_uppercase + string.ascii_lowercase


def token_text(i, vocab):
    """Token i of a `vocab`-token vocabulary: two letters."""
    width = 1
    while width * width < vocab:
        width += 1
    assert width <= len(LETTERS), vocab
    return LETTERS[i // width] + LETTERS[i % width]


def write_tokenizer(path, vocab):
    """A Hugging Face tokenizer.json whose vocabulary is exactly `vocab` tokens
    (ExecuTorch's runner samples over the tokenizer's vocabulary)."""
    tokens = {token_text(i, vocab): i for i in range(vocab)}
    level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
             "use_regex": True}
    spec = {"version": "1.0", "truncation": None, "padding": None, "added_tokens": [],
            "normalizer": None, "pre_tokenizer": level, "post_processor": None, "decoder": level,
            "model": {"type": "BPE", "dropout": None, "unk_token": None,
                      "continuing_subword_prefix": None, "end_of_word_suffix": None,
                      "fuse_unk": False, "byte_fallback": False, "vocab": tokens,
                      "merges": [f"{t[0]} {t[1]}" for t in tokens]}}
    with open(path, "w") as f:
        json.dump(spec, f)


def main():
    program, tokenizer, prompt_id, count = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    import anefit.executorch as ae

    ae.register_backend()
    from executorch.extension.llm.runner import GenerationConfig, TextLLMRunner
    from executorch.runtime import Runtime

    (vocab,) = Runtime.get().load_program(program).load_method("get_vocab_size").execute([])
    write_tokenizer(tokenizer, int(vocab))
    runner = TextLLMRunner(program, tokenizer)
    sys.stdout.flush()
    runner.generate(token_text(prompt_id, int(vocab)),
                    GenerationConfig(echo=False, max_new_tokens=count, temperature=0.0))


if __name__ == "__main__":
    main()
