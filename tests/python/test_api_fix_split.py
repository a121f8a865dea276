"""anefit.fix, anefit.split and anefit.executorch against `anefit fix` and
`anefit split` on the same models: the same passes, changes and checks, the
same plan JSON and skip list, byte for byte where the command line prints the
library's rendering; outputs under the same policy; the partitioner arguments
a report recommends; bad input as InputError with the command line's line."""

import ast
import json
import os

import pytest

from conftest import EXAMPLES_DIR, FIXTURES_DIR, error_line, fixture_package

EXAMPLE = os.path.join(EXAMPLES_DIR, "lfm2_shortconv.mlpackage")
PTE_STATES = os.path.join(FIXTURES_DIR, "pte", "lfm2_coreml_states.pte")
PTE_EXPORT_LLM = os.path.join(FIXTURES_DIR, "pte", "lfm2_export_llm_fp16.pte")


def test_fix_does_what_the_command_line_does(anefit_py, anefit, tmp_path):
    cli_out = tmp_path / "cli.mlpackage"
    cli = anefit("fix", EXAMPLE, "-o", cli_out, check=True).stdout.splitlines()
    out = tmp_path / "py.mlpackage"
    result = anefit_py.fix(EXAMPLE, out)
    assert result.ok and result.verifies and result.verification == "same"
    assert f"  passes: {result.pipeline} (for {', '.join(result.picked_for)})" in cli
    assert [f"  {c}" for c in result.changes + result.diagnostics] == \
        [line for line in cli[2:] if not line.startswith(
            ("check ", "  main:", "verify", "wrote", "residency", "    after ", "left off", "  ANE-",
             "at the ANE's precision", "  original:", "  fixed:"))]
    # The residency the command line prints, stage by stage.
    stages = [r["stage"] for r in result.residency]
    assert stages[0] == "check" and stages[1:] == [p.split("{")[0] for p in
                                                   result.pipeline.split(",")]
    first, last = result.residency[0], result.residency[-1]
    pct = lambda a, b: f"{100 * a / b:.1f}%"
    assert (f"  main: ops on the ANE {pct(first['ane_ops'], first['ops'])} -> "
            f"{pct(last['ane_ops'], last['ops'])}, FLOPs {pct(first['ane_flops'], first['flops'])}"
            f" -> {pct(last['ane_flops'], last['flops'])}, boundaries {first['boundaries']} -> "
            f"{last['boundaries']}") in cli
    assert result.not_run == [] and not result.lossy
    assert result.steps == 8 and result.values_compared > 0 and result.first_mismatch == ""
    assert result.output == str(out) and os.path.isdir(out)
    assert result.state_map_path == str(tmp_path / "py.statemap.json")
    with open(result.state_map_path) as f:
        assert json.loads(f.read()) == json.loads(result.state_map_json)
    assert (tmp_path / "cli.statemap.json").read_text() == result.state_map_json + "\n"
    assert len(result.carries) == 2
    # The checks before and after are the command line's checks of input and output.
    assert result.before.to_json() == anefit_py.check(EXAMPLE).to_json()
    assert result.before.verdict == "at-risk" and result.after.verdict == "ane"
    assert result.after.verdict == anefit_py.check(cli_out).verdict
    assert anefit_py.load(out).to_mil() == anefit_py.load(cli_out).to_mil()
    assert result.model.to_mil() == anefit_py.load(out).to_mil()


def test_fix_in_memory_and_chosen_passes(anefit_py, tmp_path):
    model = anefit_py.load(EXAMPLE)
    result = anefit_py.fix(model, passes=["canonicalize", "dce"], verify=False)
    assert result.output is None and result.state_map_path is None
    assert result.pipeline == "canonicalize,dce" and result.picked_for == []
    assert result.verification == "not-run" and result.ok
    assert result.after.verdict == "at-risk"  # the states are still there
    saved = tmp_path / "saved.mil"
    result.model.save(saved)
    assert anefit_py.load(saved).functions[0].name == "main"


def test_fix_refuses_what_the_command_line_refuses(anefit_py, anefit, tmp_path):
    out = tmp_path / "f.mlpackage"
    assert anefit_py.fix(EXAMPLE, out).ok
    with pytest.raises(anefit_py.InputError) as e:
        anefit_py.fix(EXAMPLE, out)
    assert str(e.value) == error_line(anefit("fix", EXAMPLE, "-o", out))
    assert anefit_py.fix(EXAMPLE, out, force=True).ok
    with pytest.raises(anefit_py.InputError) as e:
        anefit_py.fix(EXAMPLE, tmp_path / "g.mlpackage", passes="nope")
    assert str(e.value) == error_line(
        anefit("fix", EXAMPLE, "-o", tmp_path / "g.mlpackage", "--passes", "nope"))
    assert not (tmp_path / "g.mlpackage").exists()
    with pytest.raises(anefit_py.InputError, match="output .* is or lies inside an input|input"):
        anefit_py.fix(EXAMPLE, os.path.join(EXAMPLE, "inner.mlpackage"))
    with pytest.raises(anefit_py.InputError, match="verify"):
        anefit_py.fix(EXAMPLE, verify="sometimes")
    with pytest.raises(anefit_py.InputError, match="steps"):
        anefit_py.fix(EXAMPLE, steps=0)
    with pytest.raises(anefit_py.InputError):
        anefit_py.fix(tmp_path / "missing.mlpackage")


BYTES_TOKENIZER = os.path.join(FIXTURES_DIR, "..", "lit", "runtime", "Inputs",
                               "bytes-tokenizer.json")


def test_fix_with_a_text_is_the_command_lines(anefit_py, anefit, tmp_path):
    """fix(text=, tokenizer=, max_tokens=, max_ppl_rise=, budget=) as `anefit fix
    --text --tokenizer --max-tokens --max-ppl-rise --budget`: calibrated on the
    text, judged by its perplexity there, the same perplexities printed."""
    text = tmp_path / "text.txt"
    text.write_text("The quick brown fox jumps over the lazy dog.")
    args = ["--requantize", "lut4", "--text", text, "--tokenizer", BYTES_TOKENIZER,
            "--max-tokens", "30", "--max-ppl-rise", "1"]
    cli = anefit("fix", PTE_EXPORT_LLM, "-o", tmp_path / "cli.pte", *args,
                 check=True).stdout.splitlines()
    out = tmp_path / "py.pte"
    program = anefit_py.fix(PTE_EXPORT_LLM, out, requantize="lut4", text=text,
                            tokenizer=BYTES_TOKENIZER, max_tokens=30, max_ppl_rise=1)
    assert program.ok and program.output == str(out)
    (result,) = program.delegates
    assert result.lossy
    assert result.calibration["source"] == f"{text}'s first 30 tokens, teacher-forced"
    assert not result.calibration["random"] and result.calibration["weights"] == 113
    assert any("indices by error feedback on 113 linears" in c for c in result.changes)
    t = result.text
    assert t["predicted"] == 29
    assert (f"  original fp32: perplexity {t['original_fp32']:.4g}, top-1 is the next token "
            f"on {t['original_top1']}/29") in cli
    for name in ("fixed_fp32", "fixed_fp16"):
        run = t[name]
        assert run["rise"] == pytest.approx(run["perplexity"] / t["original_fp32"] - 1)
        assert any(line.startswith(f"  {name.replace('_', ' ')}: perplexity "
                                   f"{run['perplexity']:.4g} (") and
                   f"agrees with the original's on {run['agrees_with_original']}/29" in line
                   for line in cli), name
    # The program written is the one measured.
    measured = anefit_py.perplexity(str(out), text, BYTES_TOKENIZER, max_tokens=30)
    assert measured["fp32"]["perplexity"] == pytest.approx(t["fixed_fp32"]["perplexity"],
                                                           rel=1e-6)
    # Bad input: the command line's line, nothing written.
    with pytest.raises(anefit_py.InputError, match="text: expected tokenizer= beside it"):
        anefit_py.fix(PTE_EXPORT_LLM, tmp_path / "x.pte", requantize="lut4", text=text)
    with pytest.raises(anefit_py.InputError) as e:
        anefit_py.fix(PTE_EXPORT_LLM, tmp_path / "b.pte", requantize="auto", budget="100K")
    assert str(e.value) == error_line(anefit("fix", PTE_EXPORT_LLM, "-o", tmp_path / "b.pte",
                                             "--requantize", "auto", "--budget", "100K"))
    with pytest.raises(anefit_py.InputError, match="budget: expected a size"):
        anefit_py.fix(PTE_EXPORT_LLM, tmp_path / "b.pte", requantize="auto", budget="lots")
    assert not (tmp_path / "x.pte").exists() and not (tmp_path / "b.pte").exists()


def test_split_is_the_command_lines_plan(anefit_py, anefit):
    for path in (EXAMPLE, PTE_STATES):
        plan = anefit_py.split(path)
        assert plan.to_json() == anefit("split", path, "--json").stdout
        assert plan.skip_list() == anefit("split", path, "--skip-list").stdout
        j = json.loads(plan.to_json())
        assert [f["function"] for f in plan.functions] == [f["function"] for f in j["functions"]]
        assert plan.skip_ops_for_coreml_delegation == \
            plan.report.skip_ops_for_coreml_delegation
        assert plan.verifications == [] and plan.ok
    assert anefit_py.split(PTE_STATES).skip_ops_for_coreml_delegation == \
        ["aten.embedding.default", "aten.index.tensor"]
    assert anefit_py.split(EXAMPLE).skip_ops_for_coreml_delegation == []


def test_split_emits_and_proves_regions(anefit_py, tmp_path):
    path = fixture_package("llama_attention", generate=False) or EXAMPLE
    plan = anefit_py.split(path, emit_dir=tmp_path / "regions", verify=True)
    assert plan.ok and plan.written_models
    assert all(os.path.isdir(p) for p in plan.written_models)
    assert [v["ok"] for v in plan.verifications] == [True] * len(plan.verifications)
    assert all(v["max_abs_diff"] == 0 for v in plan.verifications)
    with pytest.raises(anefit_py.InputError, match="emit_dir"):
        anefit_py.split(path, verify=True)


def test_check_program_checks_every_delegate(anefit_py, anefit):
    import anefit.executorch as ae

    reports = ae.check_program(PTE_STATES)
    delegates = anefit_py.load_delegates(PTE_STATES)
    assert [r.path for r in reports] == [m.path for m in delegates]
    for r in reports:
        assert r.to_json() == anefit("check", r.path, "--json").stdout
    with pytest.raises(anefit_py.InputError):
        ae.check_program(EXAMPLE)


def _split_skip_list_arguments(anefit, program):
    """The keyword arguments of the CoreMLPartitioner call `anefit split
    --skip-list` writes for `program` (compile_specs, the user's, left out)."""
    snippet = anefit("split", "--skip-list", program, check=True).stdout
    calls = [node for node in ast.walk(ast.parse(snippet)) if isinstance(node, ast.Call)
             and getattr(node.func, "id", "") == "CoreMLPartitioner"]
    assert len(calls) == 1, snippet
    return {k.arg: ast.literal_eval(k.value) for k in calls[0].keywords
            if k.arg != "compile_specs"}


def test_partitioner_kwargs_are_what_split_writes(anefit_py, anefit, tmp_path):
    import anefit.executorch as ae

    # The export_llm program with its embedding lookup renamed in the Core ML
    # payload (same length, so every offset holds) to an aten op other than
    # the one the ANE-OP-007 remedy names: the skip list names the op the model
    # has, and Python does not add the remedy's literal beside it.
    data = open(PTE_EXPORT_LLM, "rb").read()
    assert data.count(b"aten_embedding_default") > 1
    renamed = tmp_path / "embedding_bag.pte"
    renamed.write_bytes(data.replace(b"aten_embedding_default", b"aten_embedding_bag_0_1"))
    reports = ae.check_program(renamed)
    assert any('skip_ops_for_coreml_delegation=["aten.embedding.default"]' in rem["setting"]
               for r in reports for f in r.findings for rem in f.remedies)
    kwargs = ae.partitioner_kwargs(reports)
    assert kwargs == _split_skip_list_arguments(anefit, renamed)
    assert kwargs["skip_ops_for_coreml_delegation"] == ["aten.embedding_bag.default",
                                                        "aten.index.tensor"]
    # The committed programs whose remedies name skip ops: states (with
    # take_over_mutable_buffer), export_llm, several delegates.
    for name in ("lfm2_coreml_states.pte", "lfm2_export_llm_fp16.pte", "llama_coreml_multi.pte"):
        program = os.path.join(FIXTURES_DIR, "pte", name)
        assert ae.partitioner_kwargs(ae.check_program(program)) == \
            _split_skip_list_arguments(anefit, program), name


def test_partitioner_kwargs_recommend_what_the_report_says(anefit_py):
    import anefit.executorch as ae

    # Core ML states that fail: keep the buffers out of Core ML state.
    states = ae.check_program(PTE_STATES)
    assert any(rem["setting"] == "CoreMLPartitioner(take_over_mutable_buffer=False)"
               for r in states for f in r.findings if f.rule.startswith("ANE-STATE-")
               for rem in f.remedies)
    assert ae.partitioner_kwargs(states) == {
        "skip_ops_for_coreml_delegation": ["aten.embedding.default", "aten.index.tensor"],
        "take_over_mutable_buffer": False,
    }
    # The export_llm shape carries no state: the partitioner's default stands.
    llm = ae.check_program(PTE_EXPORT_LLM)
    assert not any("take_over_mutable_buffer" in rem["setting"]
                   for r in llm for f in r.findings for rem in f.remedies)
    kwargs = ae.partitioner_kwargs(llm)
    assert set(kwargs) == {"skip_ops_for_coreml_delegation"}
    skip = kwargs["skip_ops_for_coreml_delegation"]
    assert skip == sorted(set(skip))
    assert {op for r in llm for op in r.skip_ops_for_coreml_delegation} <= set(skip)
    # A model that runs on the ANE needs nothing.
    fixed = anefit_py.fix(EXAMPLE, verify=False)
    assert ae.partitioner_kwargs(fixed.after) == {"skip_ops_for_coreml_delegation": []}
