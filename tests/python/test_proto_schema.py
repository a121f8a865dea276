"""Our protobuf schema (proto/) decodes what coremltools writes, field for field.

coremltools builds and saves a small stateful ML Program; `protoc --decode` with
anefit's own .proto files must then print the model without a single unknown
field (protoc shows those by number instead of by name). Skips when protoc or
coremltools is not installed.
"""

import os
import re
import shutil
import subprocess

import numpy as np
import pytest

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PROTO_DIR = os.path.join(REPO_ROOT, "proto")

# A field protoc could not name: "  502: ..." or "  500 {".
UNKNOWN_FIELD = re.compile(r"^\s*\d+\s*[:{]", re.MULTILINE)


def _protoc():
    protoc = shutil.which("protoc")
    if protoc is None:
        pytest.skip("protoc is not installed")
    return protoc


def _decode(protoc, message_type, proto_file, data):
    result = subprocess.run(
        [protoc, "-I", PROTO_DIR, "--decode=" + message_type, os.path.join(PROTO_DIR, proto_file)],
        input=data,
        capture_output=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr.decode()
    return result.stdout.decode()


def _build_package(ct, out_dir):
    """A stateful iOS18 program with a blob weight, an immediate int32 const and a cond."""
    from coremltools.converters.mil import Builder as mb

    weight = np.arange(16, dtype=np.float16).reshape(4, 4) / 8

    @mb.program(
        input_specs=[
            mb.TensorSpec(shape=(1, 4), dtype=ct.converters.mil.mil.types.fp16),
            mb.StateTensorSpec(shape=(1, 4), dtype=ct.converters.mil.mil.types.fp16),
        ],
        opset_version=ct.target.iOS18,
    )
    def prog(x, cache):
        old = mb.read_state(input=cache)
        summed = mb.add(x=x, y=old)
        mb.coreml_update_state(state=cache, value=summed)
        projected = mb.linear(x=summed, weight=weight)
        shape = mb.const(val=np.array([4, 1], dtype=np.int32))
        flat = mb.reshape(x=projected, shape=shape)
        positive = mb.greater(x=mb.reduce_sum(x=flat), y=np.float16(0))
        picked = mb.cond(
            pred=positive,
            _true_fn=lambda: mb.relu(x=flat),
            _false_fn=lambda: mb.identity(x=flat),
        )
        return picked

    model = ct.convert(
        prog,
        convert_to="mlprogram",
        minimum_deployment_target=ct.target.iOS18,
        compute_precision=ct.precision.FLOAT16,
        skip_model_load=True,
    )
    path = os.path.join(out_dir, "tiny.mlpackage")
    model.save(path)
    return path


@pytest.fixture(scope="module")
def tiny_model(coremltools, tmp_path_factory):
    """The bytes of _build_package's model.mlmodel, built once for the module."""
    package = _build_package(coremltools, str(tmp_path_factory.mktemp("tiny")))
    with open(os.path.join(package, "Data", "com.apple.CoreML", "model.mlmodel"), "rb") as f:
        return f.read()


def test_schema_decodes_coremltools_model_without_unknown_fields(tiny_model):
    protoc = _protoc()
    text = _decode(protoc, "anefit.coreml.Model", "Model.proto", tiny_model)

    unknown = UNKNOWN_FIELD.findall(text)
    assert not unknown, "fields our schema does not know:\n" + "\n".join(unknown)
    # The parts that matter were decoded by name, not skipped.
    assert "specificationVersion: 9" in text
    assert "mlProgram {" in text
    assert 'opset: "CoreML8"' in text
    assert "stateType {" in text
    assert "blobFileValue {" in text
    assert 'fileName: "@model_path/weights/weight.bin"' in text
    assert re.search(r"bytes \{\s*values:", text), "fp16 immediates travel as bytes"
    assert 'type: "write_state"' in text
    assert 'type: "cond"' in text
    assert re.search(r"blocks \{", text)
    assert 'key: "com.github.apple.coremltools.version"' in text


def test_schema_encodes_what_coremltools_decodes(coremltools, tiny_model):
    """Text decoded with our schema, encoded again with our schema, parses in coremltools'
    own generated classes to exactly the original message: the field types agree too."""
    protoc = _protoc()
    ct = coremltools
    data = tiny_model
    text = _decode(protoc, "anefit.coreml.Model", "Model.proto", data)

    result = subprocess.run(
        [protoc, "-I", PROTO_DIR, "--encode=anefit.coreml.Model", os.path.join(PROTO_DIR, "Model.proto")],
        input=text.encode(),
        capture_output=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr.decode()

    original = ct.proto.Model_pb2.Model()
    original.ParseFromString(data)
    reencoded = ct.proto.Model_pb2.Model()
    reencoded.ParseFromString(result.stdout)
    assert reencoded == original


def test_schema_reports_other_model_kinds_as_unknown_fields(coremltools, tmp_path):
    """A NeuralNetwork model is not declared in our schema: its field 500 stays unknown,
    which is exactly what the reader relies on to refuse it."""
    protoc = _protoc()
    ct = coremltools
    from coremltools.models import datatypes
    from coremltools.models.neural_network import NeuralNetworkBuilder

    builder = NeuralNetworkBuilder(
        [("x", datatypes.Array(2))], [("y", datatypes.Array(2))], disable_rank5_shape_mapping=True
    )
    builder.add_activation("relu", "RELU", "x", "y")
    data = builder.spec.SerializeToString()

    text = _decode(protoc, "anefit.coreml.Model", "Model.proto", data)
    assert re.search(r"^500 \{", text, re.MULTILINE), text
    assert "mlProgram" not in text
