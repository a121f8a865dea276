//===- ModelBindings.cpp - anefit.load and the Model classes --------------===//
//
// `load(path)` reads any model format the command line reads; `Model`,
// `Function`, `Feature` and `Op` describe it the way `anefit show` does:
// functions, inputs, outputs, states (from the program's types, which are
// more precise than the description's), ops and an op histogram.
//
//===----------------------------------------------------------------------===//
#include "Bindings.h"

#include "io/ModelIO.h"
#include "io/ModelSummary.h"
#include "ir/AsmPrinter.h"
#include "ops/Weights.h"
#include "support/Error.h"

#include <nanobind/stl/filesystem.h>
#include <nanobind/stl/map.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <map>

namespace anefit::python {
namespace {

/// An input, output or state.
struct PyFeature {
  std::string name;
  std::string kind;  ///< "tensor", "state", or the description's kind
  std::string dtype; ///< "fp16", ...; empty when not a tensor or state
  bool rankKnown = true;
  std::vector<Dim> shape;
};

PyFeature featureOf(const Value &v) {
  PyFeature f;
  f.name = v.name;
  const Type &t = v.type;
  if (t.isTensor() || t.isState()) {
    f.kind = t.isState() ? "state" : "tensor";
    f.dtype = std::string(dtypeName(t.dtype()));
    f.rankKnown = t.hasRank();
    f.shape = t.shape();
  } else {
    f.kind = t.kindStr();
    for (char &c : f.kind)
      c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    f.rankKnown = false;
  }
  return f;
}

/// For models without an ML Program (a neural network .mlmodel): what
/// `show` says of the description (io/ModelSummary.h), with no dtype and no
/// rank where it knows none.
PyFeature featureOf(const FeatureDescription &d) {
  FeatureSummary s = summarizeFeature(d);
  PyFeature f;
  f.name = s.name;
  f.kind = s.kind;
  bool array = s.kind == "tensor" || s.kind == "state";
  f.dtype = array && s.dtype != "unknown" ? s.dtype : "";
  f.rankKnown = array;
  f.shape = s.shape;
  return f;
}

/// (1, 64, 'is0') with ints for static dims, names for symbolic ones, '?'
/// for unknown and '*' for variadic; None when the rank is unknown.
nb::object shapeTuple(const PyFeature &f) {
  if (!f.rankKnown)
    return nb::none();
  nb::list dims;
  for (const Dim &d : f.shape) {
    if (d.isStatic())
      dims.append(d.size);
    else
      dims.append(d.str());
  }
  return nb::tuple(dims);
}

std::string featureRepr(const PyFeature &f) {
  std::string s = "Feature('" + f.name + "', ";
  if (!f.rankKnown) {
    s += "None";
  } else {
    s += "(";
    for (size_t i = 0; i < f.shape.size(); ++i)
      s += (i ? ", " : "") +
           (f.shape[i].isStatic() ? std::to_string(f.shape[i].size) : "'" + f.shape[i].str() + "'");
    s += f.shape.size() == 1 ? ",)" : ")";
  }
  return s + ", '" + f.dtype + "', " + f.kind + ")";
}

struct PyOp {
  std::string name;
  std::string type;
  std::string function;
  std::vector<std::string> operands;
  std::vector<PyFeature> outputs;
};

/// A function of a loaded model (keeps the model alive).
struct PyFunction {
  std::shared_ptr<const Model> model;
  const Function *fn = nullptr;

  std::vector<PyFeature> inputs(bool states) const {
    std::vector<PyFeature> out;
    for (const auto &in : fn->inputs)
      if (in->type.isState() == states)
        out.push_back(featureOf(*in));
    return out;
  }
  std::vector<PyFeature> outputs() const {
    std::vector<PyFeature> out;
    for (const Value *v : fn->body->outputs)
      out.push_back(featureOf(*v));
    return out;
  }
  std::vector<PyOp> ops() const {
    std::vector<PyOp> out;
    walk(static_cast<const Block &>(*fn->body), [&](const Operation &op) {
      PyOp o{op.name, op.type, fn->name, {}, {}};
      for (const Value *v : op.operandValues())
        o.operands.push_back(v->name);
      for (const auto &v : op.outputs)
        o.outputs.push_back(featureOf(*v));
      out.push_back(std::move(o));
    });
    return out;
  }
  std::map<std::string, size_t> opCounts() const {
    std::map<std::string, size_t> counts;
    walk(static_cast<const Block &>(*fn->body), [&](const Operation &op) { ++counts[op.type]; });
    return counts;
  }
};

/// The default function, or null for a model without an ML Program.
const Function *defaultFunction(const PyModel &m) {
  return m.model->program ? m.model->defaultFunction() : nullptr;
}

std::vector<PyFeature> describedFeatures(const std::vector<FeatureDescription> &ds) {
  std::vector<PyFeature> out;
  for (const FeatureDescription &d : ds)
    out.push_back(featureOf(d));
  return out;
}

std::string modelRepr(const PyModel &m) {
  std::string s = "<anefit.Model '" + m.model->sourcePath + "'";
  if (m.model->program) {
    s += " functions=[";
    for (size_t i = 0; i < m.model->program->functions.size(); ++i)
      s += (i ? ", " : "") + m.model->program->functions[i]->name;
    s += "]";
  }
  return s + ">";
}

} // namespace

std::string pathText(const std::filesystem::path &path) { return path.string(); }

PyModel loadPyModel(const std::string &path, bool openWeights) {
  std::unique_ptr<Model> model;
  {
    nb::gil_scoped_release release;
    model = loadModel(path, LoadOptions{.openWeights = openWeights});
  }
  return PyModel{std::shared_ptr<const Model>(std::move(model)), openWeights, {}};
}

const Function &functionOf(const PyModel &m, const std::string &name) {
  const Model &model = *m.model;
  if (!model.program || model.program->functions.empty())
    throw InputError(model.sourcePath + ": expected an ML Program, found a model without one");
  const Function *fn = name.empty() ? model.defaultFunction() : model.program->findFunction(name);
  if (!fn) {
    std::string names;
    for (const auto &f : model.program->functions)
      names += (names.empty() ? "" : ", ") + f->name;
    throw InputError(model.sourcePath + ": no function '" + name + "' (functions: " + names + ")");
  }
  return *fn;
}

void bindModel(nb::module_ &m) {
  nb::class_<PyFeature>(m, "Feature", "An input, output or state of a function.")
      .def_ro("name", &PyFeature::name, "The name the model uses.")
      .def_ro("kind", &PyFeature::kind,
              "``'tensor'`` or ``'state'`` (a Core ML state); other value kinds by their "
              "MIL name (``'list'``, ``'dict'``, ...).")
      .def_ro("dtype", &PyFeature::dtype,
              "Element type as MIL spells it: ``'fp16'``, ``'fp32'``, ``'int32'``, ... "
              "(empty when not a tensor).")
      .def_prop_ro("shape", &shapeTuple, nb::sig("def shape(self) -> tuple[int | str, ...] | None"),
                   "Dimensions: ints for static ones, the symbol's name for symbolic ones "
                   "(``'?'`` unknown, ``'*'`` variadic); None when the rank is unknown.")
      .def("__repr__", &featureRepr);

  nb::class_<PyOp>(m, "Op", "One operation of a function's program.")
      .def_ro("name", &PyOp::name, "The op's name (coremltools names it after the torch node).")
      .def_ro("type", &PyOp::type, "MIL op type: ``'conv'``, ``'read_state'``, ...")
      .def_ro("function", &PyOp::function, "The function it belongs to.")
      .def_ro("operands", &PyOp::operands, "Names of the values it reads, in order.")
      .def_ro("outputs", &PyOp::outputs, "The values it produces.")
      .def("__repr__", [](const PyOp &o) { return "Op('" + o.name + "', '" + o.type + "')"; });

  nb::class_<PyFunction>(m, "Function", "A function of an ML Program (``main``, ...).")
      .def_prop_ro(
          "name", [](const PyFunction &f) { return f.fn->name; }, "Its name.")
      .def_prop_ro(
          "opset", [](const PyFunction &f) { return f.fn->opset; },
          "Opset of its body, e.g. ``'CoreML8'`` (iOS 18).")
      .def_prop_ro(
          "inputs", [](const PyFunction &f) { return f.inputs(false); },
          "Tensor inputs, in declaration order.")
      .def_prop_ro(
          "states", [](const PyFunction &f) { return f.inputs(true); },
          "Core ML state inputs, in declaration order.")
      .def_prop_ro("outputs", &PyFunction::outputs, "Outputs, in order.")
      .def_prop_ro("ops", &PyFunction::ops,
                   "Every op in program order, consts and nested blocks' ops included.")
      .def_prop_ro("op_counts", &PyFunction::opCounts, "Number of ops of each type.")
      .def("__repr__",
           [](const PyFunction &f) { return "<anefit.Function '" + f.fn->name + "'>"; });

  nb::class_<PyModel>(m, "Model",
                      "A Core ML model read by :func:`load`: an ``.mlpackage``, ``.mlmodel``, MIL "
                      "text or a Core ML delegate of an ExecuTorch ``.pte``. Weight files are "
                      "memory-mapped, never copied.")
      .def_prop_ro(
          "path", [](const PyModel &p) { return p.model->sourcePath; },
          "Where it was read from (``'model.pte#1'`` for a delegate).")
      .def_prop_ro(
          "origin", [](const PyModel &p) { return p.model->origin; },
          "Method and delegate inside a ``.pte``; empty otherwise.")
      .def_prop_ro(
          "spec_version", [](const PyModel &p) { return p.model->specificationVersion; },
          "Core ML specification version.")
      .def_ro("compile_specs", &PyModel::compileSpecs,
              "The Core ML delegate's compile specs in a ``.pte`` (``compute_units``, "
              "``min_deployment_target``, ...); empty otherwise.")
      .def_prop_ro(
          "weights_open", [](const PyModel &p) { return p.weightsOpen; },
          "False when loaded with ``weights=False`` (it can be checked, not run or "
          "saved).")
      .def_prop_ro(
          "weight_bytes",
          [](const PyModel &p) {
            return p.model->program ? countWeights(*p.model->program).storedBytes : 0;
          },
          "Bytes of the weights as stored (compressed weights at their stored size), the "
          "count ``anefit show`` and ``check`` print. Counted from the types: weight data is "
          "not read.")
      .def_prop_ro(
          "dense_weight_bytes",
          [](const PyModel &p) {
            return p.model->program ? countWeights(*p.model->program).denseBytes : 0;
          },
          "Bytes of the weights decompressed, as the compute ops read them.")
      .def_prop_ro(
          "functions",
          [](const PyModel &p) {
            std::vector<PyFunction> out;
            if (p.model->program)
              for (const auto &fn : p.model->program->functions)
                out.push_back(PyFunction{p.model, fn.get()});
            return out;
          },
          "Functions of the ML Program (empty for a model without one).")
      .def_prop_ro(
          "default_function",
          [](const PyModel &p) {
            const Function *fn = defaultFunction(p);
            return fn ? fn->name : std::string();
          },
          "Name of the function Core ML runs by default.")
      .def_prop_ro(
          "inputs",
          [](const PyModel &p) {
            const Function *fn = defaultFunction(p);
            return fn ? PyFunction{p.model, fn}.inputs(false)
                      : describedFeatures(p.model->description.inputs);
          },
          "Tensor inputs of the default function.")
      .def_prop_ro(
          "states",
          [](const PyModel &p) {
            const Function *fn = defaultFunction(p);
            return fn ? PyFunction{p.model, fn}.inputs(true)
                      : describedFeatures(p.model->description.states);
          },
          "Core ML states of the default function.")
      .def_prop_ro(
          "outputs",
          [](const PyModel &p) {
            const Function *fn = defaultFunction(p);
            return fn ? PyFunction{p.model, fn}.outputs()
                      : describedFeatures(p.model->description.outputs);
          },
          "Outputs of the default function.")
      .def_prop_ro(
          "ops",
          [](const PyModel &p) {
            const Function *fn = defaultFunction(p);
            return fn ? PyFunction{p.model, fn}.ops() : std::vector<PyOp>{};
          },
          "Ops of the default function (see :attr:`Function.ops`).")
      .def_prop_ro(
          "op_counts",
          [](const PyModel &p) {
            std::map<std::string, size_t> counts;
            if (p.model->program)
              for (const auto &fn : p.model->program->functions)
                for (const auto &[type, n] : PyFunction{p.model, fn.get()}.opCounts())
                  counts[type] += n;
            return counts;
          },
          "Number of ops of each type over every function.")
      .def_prop_ro(
          "metadata", [](const PyModel &p) { return p.model->description.metadata.userDefined; },
          "The model's user-defined metadata.")
      .def(
          "to_mil", [](const PyModel &p) { return modelToString(*p.model); },
          "The program as MIL text (what ``anefit dump`` prints).")
      .def(
          "save",
          [](const PyModel &p, const std::filesystem::path &path) {
            std::string out = pathText(path);
            nb::gil_scoped_release release;
            saveModel(*p.model, out);
          },
          nb::arg("path"),
          "Writes the model in the format ``path``'s extension names (``.mlpackage``, "
          "``.mlmodel``, ``.mil``), atomically. Needs the weights open.")
      .def("__repr__", &modelRepr);

  m.def(
      "load_delegates",
      [](const std::filesystem::path &path, bool weights) {
        std::string file = pathText(path);
        std::vector<EmbeddedModel> embedded;
        {
          nb::gil_scoped_release release;
          embedded = loadPteModels(file, LoadOptions{.openWeights = weights});
        }
        std::vector<PyModel> out;
        for (EmbeddedModel &e : embedded)
          out.push_back(PyModel{std::shared_ptr<const Model>(std::move(e.model)), weights,
                                std::move(e.compileSpecs)});
        return out;
      },
      nb::arg("path"), nb::arg("weights") = false,
      "Every Core ML delegate of the ExecuTorch program at ``path``, in order (``model.path`` "
      "is ``'program.pte#N'``). Raises :class:`InputError` for a malformed program.");

  m.def(
      "load",
      [](const std::filesystem::path &path, bool weights) {
        return loadPyModel(pathText(path), weights);
      },
      nb::arg("path"), nb::arg("weights") = true,
      "Reads a model: an ``.mlpackage`` directory, an ``.mlmodel``, MIL text (``.mil``) or an "
      "ExecuTorch ``.pte`` (``'model.pte#1'`` picks its second Core ML delegate). Weight "
      "files are memory-mapped (``weights=False`` does not open them: enough to check). "
      "Raises :class:`InputError` for a malformed or missing file.");
}

} // namespace anefit::python
