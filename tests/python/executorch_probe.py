#!/usr/bin/env python3
"""What ExecuTorch's own Python runtime and serializer see in .pte files.

Run with a Python that has `executorch` (the tests call it through
conftest.executorch_probe). Prints one JSON object {path: report}:

  methods       program.method_names, sorted
  metadata      {method: {"inputs": [[dtype, sizes], ...], "outputs": [...]}}
  load          {method: "ok" | "<error text>"} from Program.load_method
  values        {method: [outputs]} for loaded methods that take no inputs
  backends      the backends registered in this runtime
  program       from ExecuTorch's deserializer: per plan the operators, the
                instructions and values with every delegate payload replaced
                by its sha256, so two files can be compared structurally
  payloads      sha256 of each delegate payload, in plan/delegate order
  coreml        per Core ML payload, unpacked with ExecuTorch's own inmemoryfs
                (executorchcoreml.unflatten_directory_contents) and loaded with
                coremltools (spec and ML Program): metadata.json, the model's
                input and output names, and its op count

On Linux the Core ML backend is not registered, so loading a method with a
Core ML delegate fails with ExecuTorch's NotFound; everything else (program
parsing with internal-consistency verification, method metadata, the
methods without delegates) runs.
"""
import dataclasses
import enum
import hashlib
import json
import sys


def _plain(obj):
    if dataclasses.is_dataclass(obj):
        return {f.name: _plain(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, enum.Enum):
        return obj.name
    if isinstance(obj, (list, tuple)):
        return [_plain(x) for x in obj]
    if isinstance(obj, (bytes, bytearray)):
        return "sha256:" + hashlib.sha256(obj).hexdigest()
    return obj


def unpacked_coreml(program):
    """What ExecuTorch's inmemoryfs and coremltools make of each Core ML payload."""
    import os
    import tempfile

    import coremltools as ct
    from coremltools.converters.mil.frontend.milproto.load import load as milproto_load
    from executorch.backends.apple.coreml import executorchcoreml

    out = []
    for plan in program.execution_plan:
        for d in plan.delegates:
            if d.id != "CoreMLBackend" or d.processed.location.name != "INLINE":
                continue
            data = program.backend_delegate_data[d.processed.index].data
            with tempfile.TemporaryDirectory() as tmp:
                if not executorchcoreml.unflatten_directory_contents(data, tmp):
                    out.append({"error": "unflatten_directory_contents failed"})
                    continue
                (root,) = os.listdir(tmp)
                base = os.path.join(tmp, root)
                with open(os.path.join(base, "metadata.json")) as f:
                    metadata = json.load(f)
                package = os.path.join(base, "model.mlpackage")
                spec = ct.utils.load_spec(package)
                weights = os.path.join(package, "Data", "com.apple.CoreML", "weights")
                prog = milproto_load(spec, specification_version=spec.specificationVersion,
                                     file_weights_dir=weights if os.path.isdir(weights) else "")
                ops = sum(len(fn.operations) for fn in prog.functions.values())
                out.append({"root": root, "metadata": metadata,
                            "inputs": [i.name for i in spec.description.input],
                            "outputs": [o.name for o in spec.description.output],
                            "states": [s.name for s in spec.description.state],
                            "ops": ops})
    return out


def deserialized(path):
    from executorch.exir._serialize._program import deserialize_pte_binary

    with open(path, "rb") as f:
        pte = deserialize_pte_binary(f.read())
    program = pte.program
    payloads = []
    for plan in program.execution_plan:
        for d in plan.delegates:
            if d.processed.location.name == "INLINE":
                payloads.append(
                    hashlib.sha256(program.backend_delegate_data[d.processed.index].data).hexdigest())
    try:
        coreml = unpacked_coreml(program)
    except ImportError as e:  # coremltools missing in this environment
        coreml = [{"error": f"not checked: {e}"}]
    return _plain(program), payloads, coreml


def tensor_meta(get, i):
    """[dtype, sizes] of a tensor input/output; "non-tensor" for an int, bool, ..."""
    try:
        meta = get(i)
    except IndexError:
        return "non-tensor"
    return [str(meta.dtype()), list(meta.sizes())]


def probe(path):
    from executorch.runtime import Runtime, Verification

    rt = Runtime.get()
    out = {"backends": sorted(rt.backend_registry.registered_backend_names)}
    program = rt.load_program(path, verification=Verification.InternalConsistency)
    out["methods"] = sorted(program.method_names)
    out["metadata"], out["load"], out["values"] = {}, {}, {}
    for name in out["methods"]:
        md = program.metadata(name)
        out["metadata"][name] = {
            "inputs": [tensor_meta(md.input_tensor_meta, i) for i in range(md.num_inputs())],
            "outputs": [tensor_meta(md.output_tensor_meta, i) for i in range(md.num_outputs())],
        }
        try:
            method = program.load_method(name)
        except Exception as e:  # noqa: BLE001 - the runtime raises RuntimeError
            out["load"][name] = str(e)
            continue
        out["load"][name] = "ok"
        if md.num_inputs() == 0:
            out["values"][name] = [v if isinstance(v, (bool, int, float)) else str(v)
                                   for v in method.execute([])]
    out["program"], out["payloads"], out["coreml"] = deserialized(path)
    return out


def main():
    json.dump({p: probe(p) for p in sys.argv[1:]}, sys.stdout)


if __name__ == "__main__":
    main()
