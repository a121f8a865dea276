"""anefit.fix on an ExecuTorch program: `anefit.fix("x.pte", "y.pte")` is
`anefit fix x.pte -o y.pte` (one library call behind both), on the committed
export_llm exports.

* The result names each Core ML delegate's rewrite and its proof; the written
  program carries the model the command line writes (the payload's
  identifier is fresh at every write).
* anefit.check finds no compile or runtime failure in y.pte, and the delegate
  keeps its interface.
* Original and fixed programs, stepped 8 decode steps at positions 0..7 in
  anefit.Session (ExecuTorch's buffer write-back carried), give the same
  logits in fp32 and in fp16.
* What the command line refuses raises InputError with its line; nothing is
  written.
"""

import os

import numpy as np
import pytest

from conftest import (EXAMPLES_DIR, FIXTURES_DIR, assert_steps_alike, decode_inputs, error_line,
                      fixture_steps)

PTE_DIR = os.path.join(FIXTURES_DIR, "pte")
EXPORTS = ["lfm2_export_llm_fp16", "lfm2_export_llm_4w"]
STEPS = 8
LOGITS = "aten_linear_default_112"
# scale-norm is proven equal up to fp32 rounding, element by element; the
# 4w export's fp16 KV caches within 2 fp16 steps at max(|value|, the
# tensor's RMS) (docs/fix.md, Verification). The proofs take the default seed.
SEED = 0


def blocking(report):
    return [f for f in report.findings if f.effect in ("compile-fail", "runtime-fail")]


def same_payload(anefit_py, a, b):
    """Two programs carry the same Core ML models (read back as MIL text)."""
    return [m.to_mil() for m in anefit_py.load_delegates(a)] == \
        [m.to_mil() for m in anefit_py.load_delegates(b)]


@pytest.fixture(scope="module")
def fixed(anefit_py, tmp_path_factory):
    """{name: (x.pte, y.pte, ProgramFixResult)} made once for the module."""
    out = {}
    d = tmp_path_factory.mktemp("fixed")
    for name in EXPORTS:
        x = os.path.join(PTE_DIR, name + ".pte")
        y = d / (name + ".fixed.pte")
        out[name] = (x, str(y), anefit_py.fix(x, y, seed=SEED))
    return out


@pytest.mark.parametrize("name", EXPORTS)
def test_fix_writes_the_program_the_command_line_writes(anefit_py, anefit, fixed, tmp_path, name):
    x, y, result = fixed[name]
    assert isinstance(result, anefit_py.ProgramFixResult)
    assert result.ok and result.output == y and os.path.isfile(y)
    (d,) = result.delegates
    assert d.path == x + "#0"
    # kv-write-static picked for the (contested, so at-risk) ANE-STATE-006.
    assert d.picked_for == ["ANE-STATE-006", "ANE-DTYPE-005"]
    assert d.pipeline.startswith("kv-write-static,scale-norm")
    assert d.verification == "same" and d.steps == STEPS and d.first_mismatch == ""
    assert d.values_compared == 110592  # logits and 22 written-back buffers, 8 steps
    assert d.carries == {} and d.state_map_json == ""  # no Core ML state moved
    assert blocking(d.before) and not blocking(d.after)
    cli = tmp_path / "cli.pte"
    log = anefit("fix", x, "-o", cli, "--verify", "--seed", str(SEED), check=True).stdout
    assert f"  passes: {d.pipeline} (for {', '.join(d.picked_for)})" in log
    assert same_payload(anefit_py, cli, y)


@pytest.mark.parametrize("name", EXPORTS)
def test_fixed_program_checks_clean_with_the_same_interface(anefit_py, fixed, name):
    x, y, result = fixed[name]
    before, after = anefit_py.check(x), anefit_py.check(y)
    assert blocking(before) and blocking(after) == []
    assert after.verdict not in ("ane-fails", "at-risk")
    assert [f.rule for f in after.findings] == [f.rule for f in result.delegates[0].after.findings]
    (a,), (b,) = anefit_py.load_delegates(x), anefit_py.load_delegates(y)
    fa, fb = a.functions[0], b.functions[0]
    assert [(i.name, i.shape, i.dtype) for i in fb.inputs] == \
        [(i.name, i.shape, i.dtype) for i in fa.inputs]
    assert [o.name for o in fb.outputs] == [o.name for o in fa.outputs]
    assert b.to_mil() != a.to_mil()  # the rewrite is in the payload
    assert {op.type for op in b.functions[0].ops} == \
        {op.type for op in result.delegates[0].model.functions[0].ops}


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
@pytest.mark.parametrize("name", EXPORTS)
def test_original_and_fixed_step_alike(anefit_py, fixed, tmp_path, name, precision):
    x, y, _ = fixed[name]
    steps = fixture_steps(decode_inputs(tmp_path / "inputs.npz", 256, STEPS))
    logits = {}
    for tag, model in (("x", x), ("y", y)):
        session = anefit_py.Session(model, precision=precision)
        logits[tag] = [np.array(session.run(dict(s))[LOGITS]) for s in steps]
    assert_steps_alike(name, precision, logits["x"], logits["y"])


def test_fix_takes_a_delegate_model_or_a_selector(anefit_py, fixed, tmp_path):
    x, y, _ = fixed["lfm2_export_llm_4w"]
    (delegate,) = anefit_py.load_delegates(x)
    by_model = anefit_py.fix(delegate, tmp_path / "m.pte", verify=False)
    by_selector = anefit_py.fix(x + "#0", tmp_path / "s.pte", verify=False)
    for r in (by_model, by_selector):
        assert r.ok and r.delegates[0].verification == "not-run"
        assert same_payload(anefit_py, r.output, y)


def test_fix_refuses_what_the_command_line_refuses(anefit_py, anefit, tmp_path):
    states = os.path.join(PTE_DIR, "lfm2_export_llm_states.pte")
    out = tmp_path / "s.pte"
    with pytest.raises(anefit_py.InputError) as e:
        anefit_py.fix(states, out, passes="state-to-io", verify=False)
    assert "changes the Core ML delegate's interface" in str(e.value)
    assert str(e.value) == error_line(
        anefit("fix", states, "-o", out, "--passes", "state-to-io", "--no-verify"))
    assert not out.exists()
    package = os.path.join(EXAMPLES_DIR, "lfm2_shortconv.mlpackage")
    with pytest.raises(anefit_py.InputError, match="a .pte output is written from a .pte input"):
        anefit_py.fix(package, tmp_path / "p.pte")
    x = os.path.join(PTE_DIR, "lfm2_export_llm_4w.pte")
    with pytest.raises(anefit_py.InputError, match="delegate selector '#1'"):
        anefit_py.fix(x + "#1", tmp_path / "q.pte")
    assert not (tmp_path / "p.pte").exists() and not (tmp_path / "q.pte").exists()
    assert anefit_py.fix(x, tmp_path / "r.pte", verify=False).ok
    with pytest.raises(anefit_py.InputError) as e:
        anefit_py.fix(x, tmp_path / "r.pte", verify=False)
    assert str(e.value) == error_line(anefit("fix", x, "-o", tmp_path / "r.pte", "--no-verify"))
    assert anefit_py.fix(x, tmp_path / "r.pte", verify=False, force=True).ok


def test_goal_ane_requantized_lossy_is_measured_not_claimed_equal(anefit_py, tmp_path):
    x = os.path.join(PTE_DIR, "lfm2_export_llm_4w.pte")
    program = anefit_py.fix(x, tmp_path / "c8w.pte", goal="ane", requantize="c8w")
    assert program.ok and program.output == str(tmp_path / "c8w.pte")
    d = program.delegates[0]
    assert d.verification == "measured" and d.lossy and d.first_mismatch == ""
    assert 0 < d.rel_error <= 0.05 and d.mean_abs_diff > 0
    assert d.top1_output == LOGITS and d.top1_rows == STEPS
    stages = [r["stage"] for r in d.residency]
    assert stages[0] == "check" and "requantize" in stages
    before, after = d.residency[0], d.residency[-1]
    assert before["ane_flops"] / before["flops"] < 0.2 < 0.9 < after["ane_flops"] / after["flops"]
    assert after["boundaries"] < before["boundaries"]
    # An LLM without a text is judged on text it writes itself: held to no
    # perplexity rise there, the same rewrite is refused and nothing written.
    assert d.text["name"] == "its own text from seed 1"
    assert d.text["fixed_fp16"]["perplexity"] > d.text["original_fp32"]
    refused = anefit_py.fix(x, tmp_path / "tight.pte", goal="ane", requantize="c8w",
                            max_ppl_rise=0)
    assert not refused.ok and refused.output is None
    assert refused.delegates[0].verification == "too-lossy"
    assert not os.path.exists(tmp_path / "tight.pte")


def test_goal_ane_without_requantize_says_what_it_left(anefit_py):
    x = os.path.join(PTE_DIR, "lfm2_export_llm_4w.pte")
    d = anefit_py.fix(x, goal="ane", seed=SEED)  # no out: the first delegate, fixed in memory
    assert d.not_run and d.not_run[0].startswith("requantize:")
    assert not d.lossy and d.verification == "same"


def test_fix_refuses_unknown_goal_requantize_and_chip(anefit_py):
    x = os.path.join(PTE_DIR, "lfm2_export_llm_4w.pte")
    for kwargs, message in (({"goal": "fast"}, "--goal: expected compile or ane, found 'fast'"),
                            ({"requantize": "int2"}, "requantize: expected keep, fp16, c8w, c4w, "
                                                     "lut4, lut6, lut8 or auto, found 'int2'"),
                            ({"chip": "m9"}, "chip: expected one of:")):
        with pytest.raises(anefit_py.InputError) as e:
            anefit_py.fix(x, **kwargs)
        assert message in str(e.value)
