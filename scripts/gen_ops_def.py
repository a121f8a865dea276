#!/usr/bin/env python3
"""Generates src/ops/Ops.def, the op registry table, from the per-opset op list.

Usage: gen_ops_def.py PATH/TO/mil_ops_by_opset.md [-o src/ops/Ops.def]

The op list is a markdown file (one section per opset, one bullet per op with
its inputs, type domains and defaults). It is not part of the repository, so
its path is an argument; the generated table is committed and reviewed like
code. Which type-inference rule an op uses is decided here (INFER below), so
that the table stays the one place that says everything about an op.
"""
import argparse
import re
import sys

# Type-inference rule per op name; ops not listed keep their declared types.
INFER = {
    "const": "Const", "_const_symbolic": "Const",
    "cast": "Cast", "linear": "Linear", "matmul": "Matmul", "conv": "Conv",
    "conv_quantized": "Conv", "conv_transpose": "ConvTranspose",
    "quantize": "Quantize", "dequantize": "Dequantize", "einsum": "Einsum",
    "avg_pool": "Pool", "max_pool": "Pool", "l2_pool": "Pool",
    "reshape": "Reshape", "transpose": "Transpose", "expand_dims": "ExpandDims",
    "squeeze": "Squeeze", "concat": "Concat", "split": "Split", "stack": "Stack",
    "slice_by_index": "SliceByIndex", "slice_by_size": "SliceBySize",
    "slice_update": "SliceUpdate", "gather": "Gather", "gather_along_axis": "GatherAlongAxis",
    "gather_nd": "GatherNd", "scatter": "Scatter", "scatter_along_axis": "ScatterAlongAxis",
    "scatter_nd": "ScatterNd", "pad": "Pad", "tile": "Tile", "select": "Select",
    "fill": "Fill", "fill_like": "FillLike", "range_1d": "Range1d", "topk": "TopK",
    "argsort": "Argsort", "reduce_argmax": "ReduceArg", "reduce_argmin": "ReduceArg",
    "scaled_dot_product_attention": "Attention", "read_state": "ReadState",
    "write_state": "WriteState", "coreml_update_state": "UpdateState",
    "upsample_nearest_neighbor": "Upsample", "upsample_bilinear": "Upsample",
    "resize_nearest_neighbor": "ResizeTarget", "resize_bilinear": "ResizeTarget",
    "resize": "Resize", "shape": "Shape", "flatten2d": "Flatten2d",
    "depth_to_space": "DepthToSpace", "space_to_depth": "SpaceToDepth",
    "pixel_shuffle": "PixelShuffle", "pixel_unshuffle": "PixelUnshuffle",
    "layer_norm": "LayerNorm", "cond": "Cond", "while_loop": "WhileLoop",
    "non_zero": "NonZero", "one_hot": "OneHot", "sliding_windows": "SlidingWindows",
    "crop": "Crop", "random_bernoulli": "Random", "random_normal": "Random",
    "random_uniform": "Random", "gru": "Recurrent", "lstm": "Recurrent", "rnn": "Recurrent",
    "constexpr_affine_dequantize": "ConstexprAffineDequantize",
    "constexpr_cast": "ConstexprCast", "constexpr_lut_to_dense": "ConstexprLutToDense",
    "constexpr_sparse_to_dense": "ConstexprSparseToDense",
    "constexpr_blockwise_shift_scale": "ConstexprBlockwiseShiftScale",
    "constexpr_lut_to_sparse": "ConstexprLutToSparse",
    "constexpr_sparse_blockwise_shift_scale": "ConstexprSparseBlockwiseShiftScale",
    "band_part": "SameAsFirst", "cumsum": "SameAsFirst", "identity": "SameAsFirst",
    "reverse": "SameAsFirst", "reverse_sequence": "SameAsFirst", "softmax": "SameAsFirst",
    "batch_norm": "SameAsFirst", "instance_norm": "SameAsFirst", "l2_norm": "SameAsFirst",
    "local_response_norm": "SameAsFirst", "clip": "SameAsFirst", "threshold": "SameAsFirst",
    "logical_not": "SameAsFirst", "inverse": "SameAsFirst", "log": "SameAsFirst",
    "rsqrt": "SameAsFirst",
}
BINARY = {"add", "sub", "mul", "real_div", "floor_div", "mod", "pow", "maximum", "minimum"}
COMPARE = {"equal", "not_equal", "greater", "greater_equal", "less", "less_equal",
           "logical_and", "logical_or", "logical_xor"}
# Every op whose only tensor input is `x` and whose output is x's type.
UNARY_FILES = ("activation.py", "elementwise_unary.py")

# Python-side inputs that never appear in a serialized program.
PYTHON_ONLY = {"_true_fn", "_false_fn", "_existing_blocks", "_cond", "_body"}

SECTION = re.compile(r"^### (iOS1[5-8]|coreml_dialect)\b")
OP_LINE = re.compile(r"^- \*\*(\w+)\*\* — `([^`]*)`")
INPUT = re.compile(r"`(\w+)`=(\w+)\(([^)]*)\)")
SPEC_INPUT = re.compile(r"(\w+)=(\w+)\(([^)]*)\)")


def split_top(text, sep=","):
    """Splits on `sep` outside brackets and quotes."""
    parts, depth, quote, cur = [], 0, None, ""
    for ch in text:
        if quote:
            cur += ch
            if ch == quote:
                quote = None
            continue
        if ch in "\"'":
            quote = ch
        elif ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif ch == sep and depth == 0:
            parts.append(cur.strip())
            cur = ""
            continue
        cur += ch
    if cur.strip():
        parts.append(cur.strip())
    return parts


def parse_args(text):
    args = {}
    for part in split_top(text):
        if "=" in part:
            k, v = part.split("=", 1)
            args[k.strip()] = v.strip()
    return args


def parse_domains(text):
    domains = {}
    for m in re.finditer(r'"(\w+)"\s*:\s*\(([^)]*)\)', text):
        domains[m.group(1)] = [d.strip() for d in m.group(2).split(",") if d.strip()]
    return domains


def clean_default(text):
    """Turns a Python default expression into short, language-neutral text."""
    text = text.strip()
    m = re.fullmatch(r"nptype_from_builtin\([^)]*\)\((.*)\)", text)
    if m:
        return m.group(1)
    if text == "None":
        return ""
    if text.startswith("range(self.x.rank)"):
        return "all axes"
    if text.startswith("np.array([0.0]"):
        return "zeros"
    if text.startswith("list(range(self.boxes.shape[0]))"):
        return "0..num_boxes-1"
    text = text.replace("num_spatial_dims", "spatial_rank")
    return text.replace('"', "")


def param_row(name, kind, args, domains):
    const = args.get("const") == "True"
    optional = args.get("optional") == "True"
    td = args.get("td", "").strip('"')
    domain, dtypes = "", ""
    variadic = kind == "TupleInputType"
    if kind == "T":
        if td in domains:
            domain, dtypes = td, "|".join(domains[td])
        else:
            dtypes = "string" if td == "str" else td
        pkind = "Tensor"
    elif kind == "StateInputType":
        pkind = "State"
    elif kind == "ListInputType":
        pkind = "List"
    elif kind == "TupleInputType":
        pkind = "Tensor"
    elif kind == "InternalInputType":
        pkind = "Attribute"
    else:
        pkind = "Any"
    return dict(name=name, optional=optional, const=const, variadic=variadic, dtypes=dtypes,
                domain=domain, kind=pkind, default="")


def parse(path):
    ops, opset, cur = [], None, None
    with open(path, encoding="utf-8") as f:
        lines = f.read().splitlines()
    for line in lines:
        m = SECTION.match(line)
        if m:
            opset = 0 if m.group(1) == "coreml_dialect" else int(m.group(1)[3:])
            continue
        m = OP_LINE.match(line)
        if m and opset is not None:
            cur = dict(name=m.group(1), opset=opset, file=m.group(2), inputs="", domains="",
                       defaults="")
            ops.append(cur)
            continue
        if cur is None:
            continue
        s = line.strip()
        for key in ("inputs", "type_domains", "defaults"):
            if s.startswith("- " + key + ":"):
                cur[key if key != "type_domains" else "domains"] = s[len(key) + 3:].strip()
    by_key = {}
    for op in ops:
        by_key[(op["name"], op["opset"])] = op
    rows = []
    for op in ops:
        domains = parse_domains(op["domains"])
        inputs = op["inputs"]
        params = []
        if inputs.startswith("`InputSpec("):
            # "InputSpec(...) + Base.input_spec": the op's own inputs first, then the base's.
            inner = inputs[len("`InputSpec("):inputs.rindex(")")]
            for m in SPEC_INPUT.finditer(inner):
                params.append(param_row(m.group(1), m.group(2), parse_args(m.group(3)), domains))
            # Pooling's inputs are resolved below, once max_pool has been read; the
            # random ops' base contributes only `shape`, which they list themselves.
        else:
            for m in INPUT.finditer(inputs):
                params.append(param_row(m.group(1), m.group(2), parse_args(m.group(3)), domains))
        params = [p for p in params if p["name"] not in PYTHON_ONLY]
        for d in split_top(op["defaults"]):
            if "=" not in d:
                continue
            k, v = d.split("=", 1)
            for p in params:
                if p["name"] == k.strip():
                    p["default"] = clean_default(v)
        rows.append(dict(name=op["name"], opset=op["opset"], params=params,
                         infer=infer_of(op)))
    # Pooling ops listed before max_pool: resolve again now that max_pool is known.
    for row, op in zip(rows, ops):
        if op["inputs"].startswith("`InputSpec(") and "Pooling" in op["inputs"]:
            base = rows_by_name_opset(rows, "max_pool", op["opset"])
            for p in base:
                if all(q["name"] != p["name"] for q in row["params"]):
                    row["params"].append(dict(p))
            for d in split_top(op["defaults"]):
                if "=" not in d:
                    continue
                k, v = d.split("=", 1)
                for p in row["params"]:
                    if p["name"] == k.strip():
                        p["default"] = clean_default(v)
    # The proto-only op that coreml_update_state is serialized as (formats.md §3).
    rows.append(dict(name="write_state", opset=0, infer="WriteState", params=[
        dict(name="input", optional=False, const=False, variadic=False, dtypes="", domain="",
             kind="State", default=""),
        dict(name="data", optional=False, const=False, variadic=False,
             dtypes="fp16|fp32|int8|int16|int32|uint8|uint16|bool", domain="T", kind="Tensor",
             default="")]))
    return rows


def rows_by_name_opset(rows, name, opset):
    for r in rows:
        if r["name"] == name and r["opset"] <= max(opset, 15):
            return r["params"]
    return []


def infer_of(op):
    name = op["name"]
    if name in INFER:
        return INFER[name]
    if name in BINARY:
        return "Binary"
    if name in COMPARE:
        return "Compare"
    if name.startswith("reduce_"):
        return "Reduce"
    if op["file"].split("/")[-1].startswith(UNARY_FILES):
        return "SameAsFirst"
    return "None"


def cstr(s):
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def emit(rows, out):
    w = out.write
    w("//===- Ops.def - Every MIL op of iOS15..iOS18 and the coreml dialect -*- C++ -*-===//\n")
    w("//\n")
    w("// GENERATED by scripts/gen_ops_def.py from the per-opset op list; edit the\n")
    w("// script, not this file. One OP_BEGIN..OP_END group per (op, opset in which it\n")
    w("// was introduced or changed); opset 0 = coreml dialect or proto-only op.\n")
    w("//\n")
    w("// OP_BEGIN(name, opset, inference rule)\n")
    w("// PARAM(name, kind, optional, constOnly, variadic, domain, dtypes, default)\n")
    w("//\n")
    w("//===----------------------------------------------------------------------===//\n")
    for r in rows:
        w("\nOP_BEGIN(%s, %d, %s)\n" % (r["name"], r["opset"], r["infer"]))
        for p in r["params"]:
            w("PARAM(%s, %s, %d, %d, %d, %s, %s, %s)\n" % (
                cstr(p["name"]), p["kind"], p["optional"], p["const"], p["variadic"],
                cstr(p["domain"]), cstr(p["dtypes"]), cstr(p["default"])))
        w("OP_END()\n")
    w("\n#undef OP_BEGIN\n#undef PARAM\n#undef OP_END\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("reference", help="path of mil_ops_by_opset.md")
    ap.add_argument("-o", "--output", default="-")
    a = ap.parse_args()
    rows = parse(a.reference)
    if a.output == "-":
        emit(rows, sys.stdout)
    else:
        with open(a.output, "w", encoding="utf-8") as f:
            emit(rows, f)


if __name__ == "__main__":
    main()
