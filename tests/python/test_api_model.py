"""The Python API's models: anefit.load on every input format, what a Model
describes (checked against `anefit show --json`, the same library read by
the command line), saving and MIL text, and errors as InputError."""

import json
import os

import pytest

from conftest import EXAMPLES_DIR, FIXTURES_DIR, REPO_ROOT

EXAMPLE = os.path.join(EXAMPLES_DIR, "lfm2_shortconv.mlpackage")
PTE = os.path.join(FIXTURES_DIR, "pte", "lfm2_coreml_nostate.pte")
PTE_STATES = os.path.join(FIXTURES_DIR, "pte", "lfm2_coreml_states.pte")


def show_json(anefit, path):
    proc = anefit("show", path, "--json", check=True)
    return json.loads(proc.stdout)


def features(fs):
    return [(f.name, f.kind, f.dtype, f.shape) for f in fs]


def shown(entries, kind):
    return [(e["name"], kind, e["dtype"], tuple(e["shape"])) for e in entries]


def test_load_mlpackage_describes_it_as_show_does(anefit_py, anefit):
    m = anefit_py.load(EXAMPLE)
    s = show_json(anefit, EXAMPLE)
    fn = s["functions"][0]
    assert m.path == EXAMPLE
    assert m.spec_version == s["specificationVersion"]
    assert [f.name for f in m.functions] == [f["name"] for f in s["functions"]]
    assert m.default_function == "main"
    assert features(m.inputs) == shown(fn["inputs"], "tensor")
    assert features(m.outputs) == shown(fn["outputs"], "tensor")
    assert features(m.states) == shown(fn["states"], "state")
    assert m.states[0].shape == (1, 64, 2) and m.states[0].dtype == "fp16"
    assert m.op_counts == {o["type"]: o["count"] for o in s["ops"]}
    ops = m.ops
    assert sum(m.op_counts.values()) == len(ops)
    reads = [op for op in ops if op.type == "read_state"]
    assert [op.operands for op in reads] == [["layers_0_conv_state"], ["layers_1_conv_state"]]
    assert reads[0].outputs[0].shape == (1, 64, 2)
    assert m.functions[0].opset == fn["opset"]


def test_load_pte_and_its_delegate(anefit_py):
    m = anefit_py.load(PTE)
    assert m.path == PTE + "#0"
    assert "forward" in m.origin and "delegate 0" in m.origin
    names = [f.name for f in m.inputs]
    assert names[:2] == ["tokens", "attn_options_input_pos"]
    assert m.inputs[0].dtype == "int32" and m.inputs[0].shape == (1, 1)
    # "#N" picks a delegate by position, as on the command line.
    assert anefit_py.load(PTE + "#0").op_counts == m.op_counts
    with pytest.raises(anefit_py.InputError, match="#1"):
        anefit_py.load(PTE + "#1")


SMALL_MIL = """main[CoreML8](%x: (2, 3, fp32)(Tensor)) {
  block0() {
    %y: (2, 3, fp32)(Tensor) = add(x=%x, y=[1.0, 2.0, 3.0], name="y")
  } -> (%y)
}
"""


def test_save_and_load_every_format(anefit_py, tmp_path):
    m = anefit_py.load(EXAMPLE)
    assert "read_state" in m.to_mil()
    mil = tmp_path / "model.mil"
    m.save(mil)  # MIL text, its weights in weights/ beside it
    back = anefit_py.load(mil)  # os.PathLike works wherever a path does
    assert back.op_counts == m.op_counts
    assert features(back.states) == features(m.states)
    out = tmp_path / "copy.mlpackage"
    back.save(str(out))
    again = anefit_py.load(out)
    assert again.op_counts == m.op_counts and features(again.inputs) == features(m.inputs)
    with pytest.raises(anefit_py.InputError, match="must be saved as .mlpackage"):
        m.save(tmp_path / "copy.mlmodel")
    # A bare .mlmodel holds a model whose weights are inline.
    small = tmp_path / "small.mil"
    small.write_text(SMALL_MIL)
    anefit_py.load(small).save(tmp_path / "small.mlmodel")
    assert anefit_py.load(tmp_path / "small.mlmodel").op_counts == {"add": 1}


def test_model_loaded_without_weights_can_be_checked_not_run(anefit_py):
    m = anefit_py.load(EXAMPLE, weights=False)
    assert not m.weights_open
    assert anefit_py.check(m).verdict == "at-risk"
    with pytest.raises(anefit_py.InputError, match="weights=False"):
        anefit_py.Session(m)


@pytest.mark.parametrize("name,content,message", [
    ("missing.mlpackage", None, "no such file"),
    ("truncated.mlmodel", b"\x08\x09\x12\xff\xff", "truncated.mlmodel"),
    ("bad.mil", b"main[CoreML8](%x: (1, fp32)(Tensor)) {\n  block0() {\n", "bad.mil"),
    ("empty.pte", b"", "empty.pte"),
])
def test_bad_files_raise_input_error_with_the_cli_message(anefit_py, anefit, tmp_path, name,
                                                          content, message):
    path = tmp_path / name
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(anefit_py.InputError, match=message) as err:
        anefit_py.load(path)
    assert isinstance(err.value, ValueError)
    cli = anefit("show", path)
    assert cli.returncode == 2
    # The same one line the command line prints after "anefit: error: ".
    assert cli.stderr.strip() == f"anefit: error: {err.value}"


def test_unknown_function_names_the_functions(anefit_py):
    with pytest.raises(anefit_py.InputError, match=r"no function 'nope' \(functions: main\)"):
        anefit_py.Session(anefit_py.load(EXAMPLE), function="nope")


def test_package_ships_typing(anefit_py):
    d = os.path.dirname(anefit_py.__file__)
    assert os.path.isfile(os.path.join(d, "py.typed"))
    stub = open(os.path.join(d, "_core.pyi")).read()
    for name in ("class Model", "class Report", "class Session", "def check(", "def load("):
        assert name in stub, name
    assert anefit_py.__version__ == open(os.path.join(REPO_ROOT, "CMakeLists.txt")).read() \
        .split("project(anefit VERSION ")[1].split()[0]


def test_weight_sizes_are_the_checkers(anefit_py):
    for path in (EXAMPLE, os.path.join(FIXTURES_DIR, "pte", "lfm2_coreml_states.pte")):
        m = anefit_py.load(path, weights=False)
        report = anefit_py.check(m)
        assert m.weight_bytes == report.weight_bytes > 0
        assert m.dense_weight_bytes == report.dense_weight_bytes >= m.weight_bytes
