"""The byte-level BPE reader behind `anefit run --perplexity` (src/io/Tokenizer.h)
against Hugging Face's `tokenizers`, the library that wrote the format: small
tokenizers trained here with each pre-tokenizer the reader supports (GPT-2's
ByteLevel pattern, Digits then ByteLevel as SmolLM's, a Split with Llama 3's
pattern, the same with Qwen 2's single digits) must give the same ids as
`tokenizers` on text of every kind the patterns tell apart."""

import json

import pytest
from tokenizers import Regex, Tokenizer, models, pre_tokenizers, trainers

CORPUS = [
    "The quick brown fox jumps over the lazy dog. It's 2026, and they'll say we'd won.",
    "Numbers: 1, 22, 333, 4444, 55555 and 3.14159; phone +1-555-0100.",
    "Whitespace  matters:\ttabs,\nnewlines\n\n  and   runs of spaces   \n",
    "Code: def f(x):\n    return x**2 + 1  # comment\n",
    "Unicode: naïve café, Straße, ĳ, αβγ δ, 東京 and emoji 🙂 too.",
    "CAPS AND MiXeD case, DON'T and WE'RE, O'Neil's.",
] * 20

TEXTS = [
    "The quick brown fox jumps over the lazy dog.",
    "  leading spaces, trailing spaces   ",
    "It's they're we've I'm you'll he'd IT'S THEY'RE",
    "1 12 123 1234 12345 2026-12-06 3.14",
    "line one\nline two\r\n\n\tindented\n   \n",
    "naïve café Straße αβγ 東京 🙂!",
    "x**2+1;foo(bar)[baz]{qux}<>?!...",
    "unseen words: zyxwv qqqq 9876543210",
    "",
]

LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
          r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"
         r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")


def _pre(kind):
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    if kind == "gpt2":
        return byte_level
    if kind == "digits":
        return pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True), byte_level])
    pattern = LLAMA3 if kind == "llama3" else QWEN2
    return pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(pattern), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])


@pytest.fixture(params=["gpt2", "digits", "llama3", "qwen2"])
def trained(request, tmp_path):
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = _pre(request.param)
    trainer = trainers.BpeTrainer(vocab_size=600, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  special_tokens=["<|endoftext|>"], show_progress=False)
    tok.train_from_iterator(CORPUS, trainer)
    path = tmp_path / f"{request.param}.json"
    tok.save(str(path))
    return tok, path


def test_ids_are_those_of_hugging_face_tokenizers(anefit_py, trained):
    tok, path = trained
    for text in TEXTS:
        assert anefit_py.tokenize(path, text) == tok.encode(text, add_special_tokens=False).ids, text


def test_the_merges_were_used(anefit_py, trained):
    """A trained vocabulary merges common words: fewer ids than bytes."""
    _, path = trained
    text = TEXTS[0]
    assert len(anefit_py.tokenize(path, text)) < len(text.encode()) / 2


def test_other_tokenizers_are_refused(anefit_py, tmp_path):
    tok = Tokenizer(models.WordPiece({"[UNK]": 0, "a": 1}, unk_token="[UNK]"))
    path = tmp_path / "wordpiece.json"
    tok.save(str(path))
    with pytest.raises(anefit_py.InputError, match="model: expected a byte-level BPE tokenizer"):
        anefit_py.tokenize(path, "a")
    spec = json.loads(open(path).read())
    spec["model"] = {"type": "BPE", "vocab": {"a": 0}, "merges": []}
    spec["pre_tokenizer"] = {"type": "Metaspace", "replacement": "_"}
    path.write_text(json.dumps(spec))
    with pytest.raises(anefit_py.InputError, match="pre_tokenizer: expected .* found 'Metaspace'"):
        anefit_py.tokenize(path, "a")


def test_perplexity_is_the_command_lines(anefit_py, anefit, tmp_path):
    """anefit.perplexity and `anefit run --perplexity --json` give the same numbers
    (an export_llm .pte of random weights, one token per byte)."""
    import os

    from conftest import FIXTURES_DIR, REPO_ROOT
    program = os.path.join(FIXTURES_DIR, "pte", "lfm2_export_llm_fp16.pte")
    tokenizer = os.path.join(REPO_ROOT, "tests", "lit", "runtime", "Inputs", "bytes-tokenizer.json")
    text = tmp_path / "text.txt"
    text.write_text("The quick brown fox jumps over the lazy dog.")
    q = anefit_py.perplexity(program, text, tokenizer, max_tokens=12)
    cli = json.loads(anefit("run", program, "--perplexity", text, "--tokenizer", tokenizer,
                            "--max-tokens", "12", "--json", check=True).stdout)
    assert q["tokens"] == cli["tokens"] == 12 and q["predicted"] == 11
    for run in cli["runs"]:
        mine = q[run["precision"]]
        assert mine["perplexity"] == pytest.approx(run["perplexity"], rel=1e-12)
        assert mine["top1_correct"] == run["top1Correct"]
        assert mine["top1_agree_with_fp32"] == run["top1AgreeWithFp32"]
    assert q["token_input"] == "tokens" and q["position_input"] == "attn_options_input_pos"
    # In windows (window=, --window): the same numbers as the command line's.
    q = anefit_py.perplexity(program, text, tokenizer, max_tokens=40, window=16)
    cli = json.loads(anefit("run", program, "--perplexity", text, "--tokenizer", tokenizer,
                            "--max-tokens", "40", "--window", "16", "--json",
                            check=True).stdout)
    assert q["windows"] == cli["windows"] == 3 and q["predicted"] == cli["predicted"] == 37
    for run in cli["runs"]:
        assert q[run["precision"]]["perplexity"] == pytest.approx(run["perplexity"], rel=1e-12)
    with pytest.raises(anefit_py.InputError, match="window: expected 0 .one window. or at least 2"):
        anefit_py.perplexity(program, text, tokenizer, window=1)
    with pytest.raises(anefit_py.InputError, match="expected a text of at least 2 tokens"):
        text.write_text("a")
        anefit_py.perplexity(program, text, tokenizer)
