//===- ModelIO.cpp - Reading and writing models in every format -----------===//
//
// Dispatches on the format, resolves weight-file names for each container
// ("@model_path" is the directory of the model protobuf, or of the .mil file)
// and writes through the output policy of support/FileSystem.h: outputs are
// assembled under a temporary sibling name and renamed into place, and
// nothing is written over, inside or around a file the model is read from.
//
//===----------------------------------------------------------------------===//
#include "io/ModelIO.h"

#include "io/MilProto.h"
#include "io/Package.h"
#include "io/WeightFile.h"
#include "ir/AsmParser.h"
#include "ir/AsmPrinter.h"
#include "ir/Verifier.h"
#include "support/Error.h"
#include "support/FileSystem.h"
#include "support/Text.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <optional>
#include <set>
#include <sstream>

namespace fs = std::filesystem;

namespace anefit {
namespace {

std::string lowerExtension(const fs::path &p) {
  // "Foo.mlpackage/" has an empty filename; look at the directory name.
  fs::path name = p.has_filename() ? p.filename() : p.parent_path().filename();
  return asciiLower(name.extension().string());
}

/// Opens weight files for one model. Names are validated even when weights
/// are not opened, so a hostile name is reported by every command.
class WeightResolver {
public:
  /// `within`: the directory below which no path component may be a link
  /// (the package root, or the model's directory).
  WeightResolver(std::string modelDir, std::string referrer, const LoadOptions &options,
                 std::string within)
      : modelDir_(std::move(modelDir)), referrer_(std::move(referrer)), open_(options.openWeights),
        allowMissing_(options.allowMissingWeights), within_(std::move(within)) {}

  std::shared_ptr<const BlobStore> operator()(const std::string &fileName) {
    std::string path = resolveWeightPath(modelDir_, fileName, referrer_);
    std::shared_ptr<const BlobStore> store;
    if (open_ && !(allowMissing_ && fileKindOf(path, /*followLinks=*/false) == FileKind::Missing)) {
      auto it = byPath_.find(path);
      if (it != byPath_.end()) {
        store = it->second;
      } else {
        // A missing file is named together with the model that asks for it.
        if (fileKindOf(path, /*followLinks=*/false) == FileKind::Missing)
          throw InputError::at(path, "",
                               "no such file or directory (the weight file " + referrer_ +
                                   " names as '" + fileName + "')");
        store = WeightFile::open(path, within_);
        byPath_.emplace(path, store);
      }
    } else {
      // Not read, but still the model's: no output may go there.
      trackInput(path);
    }
    seen_[fileName] = store;
    return store;
  }

  const std::map<std::string, std::shared_ptr<const BlobStore>> &seen() const { return seen_; }

private:
  std::string modelDir_;
  std::string referrer_;
  bool open_;
  bool allowMissing_;
  std::string within_;
  std::map<std::string, std::shared_ptr<const BlobStore>> byPath_;
  std::map<std::string, std::shared_ptr<const BlobStore>> seen_;
};

/// Every blob-backed constant of the model, each once.
void collectBlobs(const Constant &c, std::vector<const Constant *> &out,
                  std::set<const Constant *> &seen) {
  if (c.kind == Constant::Kind::Blob) {
    if (seen.insert(&c).second)
      out.push_back(&c);
    return;
  }
  for (const Constant &e : c.elements)
    collectBlobs(e, out, seen);
}

void collectBlobs(const AttributeMap &attrs, std::vector<const Constant *> &out,
                  std::set<const Constant *> &seen) {
  for (const auto &[key, c] : attrs)
    if (c)
      collectBlobs(*c, out, seen);
}

void collectBlobs(const Block &block, std::vector<const Constant *> &out,
                  std::set<const Constant *> &seen) {
  collectBlobs(block.attributes, out, seen);
  walk(block, [&](const Operation &op) {
    collectBlobs(op.attributes, out, seen);
    for (const OpInput &in : op.inputs)
      for (const Binding &b : in.bindings)
        if (b.constant)
          collectBlobs(*b.constant, out, seen);
    for (const auto &nested : op.blocks)
      collectBlobs(nested->attributes, out, seen);
  });
}

std::vector<const Constant *> blobConstants(const Model &model) {
  std::vector<const Constant *> out;
  std::set<const Constant *> seen;
  if (!model.program)
    return out;
  collectBlobs(model.program->attributes, out, seen);
  for (const auto &f : model.program->functions) {
    collectBlobs(f->attributes, out, seen);
    collectBlobs(*f->body, out, seen);
    for (const auto &[key, block] : f->otherSpecializations)
      collectBlobs(*block, out, seen);
  }
  return out;
}

/// The weight files of the generated names "<stem>.bin" and "<stem>-<hex>.bin"
/// that the MIL text at `path` refers to, if it exists.
std::vector<std::string> ownWeightFilesOf(const fs::path &path, const std::string &stem) {
  std::vector<std::string> out;
  if (fileKindOf(path.string()) != FileKind::Regular)
    return out;
  std::shared_ptr<const MappedFile> old;
  try {
    InputOptions options;
    options.track = false;
    old = MappedFile::open(path.string(), options);
  } catch (const InputError &) {
    return out;
  }
  std::string_view text = old->text();
  std::string needle = "\"@model_path/weights/" + stem;
  for (size_t at = text.find(needle); at != std::string_view::npos;
       at = text.find(needle, at + 1)) {
    size_t start = at + std::strlen("\"@model_path/");
    size_t end = text.find('"', start);
    if (end == std::string_view::npos)
      break;
    std::string rel(text.substr(start, end - start));
    std::string name = rel.substr(std::strlen("weights/"));
    bool generated =
        name.size() == stem.size() + 17 && name.compare(0, stem.size() + 1, stem + "-") == 0 &&
        name.ends_with(".bin") &&
        name.substr(stem.size() + 1, 12).find_first_not_of("0123456789abcdef") == std::string::npos;
    if (name == stem + ".bin" || generated)
      if (std::find(out.begin(), out.end(), rel) == out.end())
        out.push_back(rel);
  }
  return out;
}

/// Writes MIL text. Blob constants must be readable from "@model_path" = the
/// directory of the .mil file: if they already are (the text is written next
/// to the weights it uses), the references are kept; otherwise their bytes
/// are copied into a new weight file beside the text and the text refers to
/// it.
///
/// Text and weights are two files, and two renames are never one atomic
/// step, so the weights never replace a file: they go to a name not in use
/// (weights/<stem>.bin, else weights/<stem>-<hex>.bin), then the text is
/// renamed into place, and only then is the weight file the old text used
/// removed. An interrupt at any moment leaves the old text with its old
/// weights or the new text with its new weights; weights placed for a text
/// that never appears are removed on failure and on SIGINT/SIGTERM.
void saveMilText(const Model &model, const fs::path &path, const OutputOptions &options) {
  fs::path dir = path.parent_path().empty() ? fs::path(".") : path.parent_path();
  std::vector<const Constant *> blobs = blobConstants(model);

  bool inPlace = true;
  for (const Constant *c : blobs) {
    std::error_code ec;
    if (!c->blob.store) {
      inPlace = false;
      break;
    }
    std::string wanted;
    try {
      wanted = resolveWeightPath(dir.string(), c->blob.fileName, path.string());
    } catch (const InputError &) {
      inPlace = false;
      break;
    }
    if (!fs::exists(wanted, ec) || !fs::equivalent(wanted, c->blob.store->path(), ec)) {
      inPlace = false;
      break;
    }
  }
  // The text's temporary exists before the weights are written, so the
  // policy (force, inputs, kind of an existing output) is checked first.
  AtomicFile text(path.string(), options);
  if (blobs.empty() || inPlace) {
    std::ostringstream printed;
    printModel(model, printed);
    text.write(printed.str());
    text.commit();
    return;
  }

  std::string stem = path.stem().string();
  fs::path weightsDir = dir / "weights";
  if (fileKindOf(weightsDir.string()) == FileKind::Missing) {
    std::error_code ec;
    fs::create_directory(weightsDir, ec);
    if (ec)
      throw InputError::at(weightsDir.string(), "", "cannot create directory: " + ec.message());
  }
  std::vector<std::string> oldWeights = ownWeightFilesOf(path, stem);
  OutputOptions weightOptions = options;
  weightOptions.force = true; // never replaces: commitAsNew picks a free name
  weightOptions.allowStream = false;
  AtomicFile weights((weightsDir / (stem + ".bin")).string(), weightOptions);

  // Point each blob constant at its copy while printing, then restore it:
  // the model is the caller's and must look unchanged afterwards. The
  // Constants were created mutable and are only shared as const.
  std::vector<std::pair<Constant *, BlobRef>> saved;
  auto restore = [&] {
    for (auto &[c, ref] : saved)
      c->blob = ref;
    saved.clear();
  };
  try {
    std::map<std::pair<const BlobStore *, uint64_t>, uint64_t> copied;
    {
      WeightWriter writer(
          [&weights](uint64_t offset, std::span<const uint8_t> bytes) {
            weights.writeAt(offset, bytes);
          },
          (weightsDir / (stem + ".bin")).string());
      for (const Constant *c : blobs) {
        if (!c->blob.store)
          throw InputError::at(c->blob.fileName, "offset " + std::to_string(c->blob.offset),
                               "weight file is not available to copy into " + path.string());
        auto key = std::make_pair(c->blob.store.get(), c->blob.offset);
        auto it = copied.find(key);
        uint64_t offset;
        if (it != copied.end()) {
          offset = it->second;
        } else {
          DType t = c->type.dtype();
          std::span<const uint8_t> data = c->data();
          uint64_t padding = 0;
          if (isSubByte(t)) {
            uint64_t used = c->numElements() * static_cast<uint64_t>(dtypeBits(t));
            padding = (8 - used % 8) % 8;
          }
          offset = writer.append(t, data, padding);
          copied.emplace(key, offset);
        }
        auto *mut = const_cast<Constant *>(c);
        saved.emplace_back(mut, mut->blob);
      }
      writer.finish();
    }
    std::string placed = weights.commitAsNew([&](int attempt) {
      return attempt == 0 ? stem + ".bin" : stem + "-" + randomHex(12) + ".bin";
    });
    std::string fileName = "@model_path/weights/" + fs::path(placed).filename().string();
    std::shared_ptr<const BlobStore> newStore = WeightFile::open(placed);
    for (auto &[c, ref] : saved) {
      uint64_t offset = copied.at({ref.store.get(), ref.offset});
      c->blob = BlobRef{fileName, offset, newStore};
    }
    std::ostringstream printed;
    printModel(model, printed);
    restore();
    text.write(printed.str());
    // The weights stop being removable before the text that names them can
    // appear: an interrupt in between leaves an unused weight file, never a
    // text whose weights are gone.
    weights.keep();
    try {
      text.commit();
    } catch (...) {
      std::error_code ec;
      fs::remove(placed, ec);
      throw;
    }
    // The old text is gone: so may be its weights, unless something still
    // reads them.
    std::vector<std::string> inputs = trackedInputs();
    for (const auto &[name, store] : model.weightFiles)
      if (store)
        inputs.push_back(fs::weakly_canonical(store->path()).string());
    for (const std::string &rel : oldWeights) {
      fs::path old = dir / rel;
      std::error_code ec;
      fs::path canon = fs::weakly_canonical(old, ec);
      if (ec || fs::equivalent(old, placed, ec) ||
          std::find(inputs.begin(), inputs.end(), canon.string()) != inputs.end())
        continue;
      fs::remove(old, ec);
    }
  } catch (...) {
    restore();
    throw;
  }
}

/// Paths the model reads from: its source and its weight files.
std::vector<std::string> modelInputPaths(const Model &model) {
  std::vector<std::string> paths;
  if (!model.sourcePath.empty())
    paths.push_back(model.sourcePath);
  for (const auto &[name, store] : model.weightFiles)
    if (store)
      paths.push_back(store->path());
  return paths;
}

/// Refuses a program whose values are defined twice or used out of scope:
/// nothing downstream can make sense of it.
void checkValueScopes(const Model &model, const std::string &path) {
  if (!model.program)
    return;
  for (const Diagnostic &d : verifyValueScopes(*model.program))
    if (d.severity == Diagnostic::Severity::Error)
      throw InputError::at(path, "", "malformed program: " + d.str().substr(7));
}

} // namespace

//===----------------------------------------------------------------------===//
// The formats of ModelFormats.def
//===----------------------------------------------------------------------===//

namespace formats {

#define FORMAT(Id, name, extensions, directory, detect, load, save, note)                          \
  bool detect(const std::string &path);                                                            \
  std::unique_ptr<Model> load(const std::string &path, const LoadOptions &options);                \
  void save(const Model &model, const std::string &path, const OutputOptions &policy);
#include "io/ModelFormats.def"

bool byExtensionOnly(const std::string &) { return false; }

void cannotSave(const Model &, const std::string &path, const OutputOptions &) {
  failExpected(path, "", "an output path ending in " + formatExtensionsText(true),
               "'" + fs::path(path).filename().string() + "'");
}

bool detectPackage(const std::string &path) { return isPackageDirectory(path); }

/// Reads a file in full, with the model's weight files resolved next to it.
template <typename Parse>
std::unique_ptr<Model> loadFile(const std::string &path, const std::string &expected,
                                const LoadOptions &options, Parse &&parse) {
  FileKind kind = fileKindOf(path);
  if (kind == FileKind::Directory)
    failExpected(path, "", expected, "a directory");
  std::string dir = fs::path(path).parent_path().string();
  WeightResolver resolver(dir, path, options, dir.empty() ? "." : dir);
  std::shared_ptr<const MappedFile> file = MappedFile::open(path);
  std::unique_ptr<Model> model =
      parse(file->bytes(), [&](const std::string &name) { return resolver(name); });
  for (const auto &[name, store] : resolver.seen())
    model->weightFiles.emplace(name, store);
  model->sourcePath = path;
  return model;
}

std::unique_ptr<Model> loadPackage(const std::string &path, const LoadOptions &options) {
  PackageLayout layout = openPackage(path);
  WeightResolver resolver(layout.modelDir, layout.modelFile, options, layout.root);
  InputOptions read;
  read.within = layout.root;
  read.track = false; // the package as a whole is tracked
  std::vector<uint8_t> bytes = readFileBytes(layout.modelFile, read);
  std::unique_ptr<Model> model = parseModelProto(
      bytes, layout.modelFile, [&](const std::string &name) { return resolver(name); });
  for (const auto &[name, store] : resolver.seen())
    model->weightFiles.emplace(name, store);
  model->sourcePath = path;
  return model;
}

std::unique_ptr<Model> loadModelFile(const std::string &path, const LoadOptions &options) {
  return loadFile(path, "a .mlmodel file", options,
                  [&](std::span<const uint8_t> bytes, const WeightOpener &open) {
                    return parseModelProto(bytes, path, open);
                  });
}

std::unique_ptr<Model> loadMilTextFile(const std::string &path, const LoadOptions &options) {
  return loadFile(path, "a .mil text file", options,
                  [&](std::span<const uint8_t> bytes, const WeightOpener &open) {
                    std::string_view text(reinterpret_cast<const char *>(bytes.data()),
                                          bytes.size());
                    return parseModelText(text, path, open, options.text);
                  });
}

void savePackage(const Model &model, const std::string &path, const OutputOptions &policy) {
  writePackage(
      path, [&](WeightWriter &weights) { return serializeModelProto(model, &weights); }, policy);
}

void saveModelFile(const Model &model, const std::string &path, const OutputOptions &policy) {
  std::string bytes;
  try {
    bytes = serializeModelProto(model, nullptr);
  } catch (const InputError &e) {
    // The serializer names the op; the user also needs to know which output.
    throw InputError::at(path, "", e.what());
  }
  writeFileAtomically(path, bytes, policy);
}

void saveMilTextFile(const Model &model, const std::string &path, const OutputOptions &policy) {
  saveMilText(model, path, policy);
}

} // namespace formats

namespace {

using LoadFn = std::unique_ptr<Model> (*)(const std::string &, const LoadOptions &);
using SaveFn = void (*)(const Model &, const std::string &, const OutputOptions &);
using DetectFn = bool (*)(const std::string &);

struct FormatRow {
  ModelFormatInfo info;
  DetectFn detect;
  LoadFn load;
  SaveFn save;
};

const std::vector<FormatRow> &formatRows() {
  static const std::vector<FormatRow> rows = {
#define FORMAT(Id, name, extensions, directory, detect, load, save, note)                          \
  {{ModelFormat::Id, name, extensions, directory != 0, &formats::save != &formats::cannotSave,     \
    note},                                                                                         \
   &formats::detect,                                                                               \
   &formats::load,                                                                                 \
   &formats::save},
#include "io/ModelFormats.def"
  };
  return rows;
}

const FormatRow &rowOf(ModelFormat format) {
  for (const FormatRow &r : formatRows())
    if (r.info.format == format)
      return r;
  throw std::logic_error("no row for a model format");
}

bool hasExtension(const ModelFormatInfo &info, const std::string &ext) {
  std::string_view all = info.extensions;
  while (!all.empty()) {
    size_t space = all.find(' ');
    if (all.substr(0, space) == ext)
      return true;
    all = space == std::string_view::npos ? std::string_view() : all.substr(space + 1);
  }
  return false;
}

} // namespace

std::span<const ModelFormatInfo> modelFormats() {
  static const std::vector<ModelFormatInfo> infos = [] {
    std::vector<ModelFormatInfo> out;
    for (const FormatRow &r : formatRows())
      out.push_back(r.info);
    return out;
  }();
  return infos;
}

const ModelFormatInfo &formatInfo(ModelFormat format) {
  static const ModelFormatInfo unknown{ModelFormat::Unknown, "unknown", "", false, false, ""};
  for (const ModelFormatInfo &info : modelFormats())
    if (info.format == format)
      return info;
  return unknown;
}

std::string formatExtensionsText(FormatSet set, std::string_view conjunction) {
  std::vector<std::string> exts;
  for (const ModelFormatInfo &info : modelFormats()) {
    if ((set == FormatSet::Writable && !info.writable) ||
        (set == FormatSet::ReadOnly && info.writable))
      continue;
    std::string_view all = info.extensions;
    while (!all.empty()) {
      size_t space = all.find(' ');
      exts.emplace_back(all.substr(0, space));
      all = space == std::string_view::npos ? std::string_view() : all.substr(space + 1);
    }
  }
  std::string text;
  for (size_t i = 0; i < exts.size(); ++i)
    text += (i == 0                 ? ""
             : i + 1 == exts.size() ? " " + std::string(conjunction) + " "
                                    : ", ") +
            exts[i];
  return text;
}

std::string formatExtensionsText(bool writable) {
  return formatExtensionsText(writable ? FormatSet::Writable : FormatSet::Readable);
}

std::string modelArgumentHelp() {
  std::string text = "Model: " + formatExtensionsText();
  std::string notes;
  for (const ModelFormatInfo &info : modelFormats())
    if (!info.note.empty())
      notes += (notes.empty() ? "" : "; ") + std::string(info.note);
  return notes.empty() ? text : text + " (" + notes + ")";
}

ModelFormat detectFormat(const std::string &path) {
  for (const FormatRow &r : formatRows())
    if (r.detect(path))
      return r.info.format;
  std::error_code ec;
  fs::path p(path);
  std::string ext = lowerExtension(p);
  bool isDir = fs::is_directory(p, ec);
  for (const FormatRow &r : formatRows())
    if ((r.info.directory || !isDir) && hasExtension(r.info, ext))
      return r.info.format;
  return ModelFormat::Unknown;
}

std::unique_ptr<Model> loadModelText(std::string_view text, const std::string &origin,
                                     const std::string &modelDir, const LoadOptions &options) {
  WeightResolver resolver(modelDir, origin, options, modelDir.empty() ? "." : modelDir);
  std::unique_ptr<Model> model = parseModelText(
      text, origin, [&](const std::string &name) { return resolver(name); }, options.text);
  for (const auto &[name, store] : resolver.seen())
    model->weightFiles.emplace(name, store);
  if (options.checkScopes)
    checkValueScopes(*model, origin);
  return model;
}

std::unique_ptr<Model> loadModel(const std::string &path, const LoadOptions &options) {
  ModelFormat format = options.format;
  bool claimed = false;
  if (format == ModelFormat::Unknown)
    for (const FormatRow &r : formatRows())
      if (r.detect(path)) {
        format = r.info.format;
        claimed = true;
        break;
      }
  FileKind kind = fileKindOf(path);
  if (!claimed && kind == FileKind::Missing)
    throw InputError::at(path, "", "no such file or directory");
  if (format == ModelFormat::Unknown)
    format = detectFormat(path);
  if (format == ModelFormat::Unknown) {
    if (kind == FileKind::Directory)
      failExpected(path, "", "a model (a .mlpackage directory with a Manifest.json)",
                   "a directory without a Manifest.json");
    failExpected(path, "", "a model file ending in " + formatExtensionsText(),
                 "'" + fs::path(path).filename().string() + "'");
  }
  std::unique_ptr<Model> model;
  try {
    model = rowOf(format).load(path, options);
  } catch (const std::bad_alloc &) {
    throw InputError::at(path, "",
                         "out of memory while reading the model; the file is corrupt or needs "
                         "more memory than is available");
  }
  if (!model)
    throw InputError::at(path, "", "no model could be read");
  if (options.checkScopes)
    checkValueScopes(*model, path);
  return model;
}

std::vector<std::unique_ptr<Model>> loadModels(const std::string &path,
                                               const LoadOptions &options) {
  std::vector<std::unique_ptr<Model>> models;
  if (options.format == ModelFormat::Unknown && fileKindOf(path) == FileKind::Regular &&
      detectFormat(path) == ModelFormat::Pte && !splitPteSelector(path).second) {
    std::vector<EmbeddedModel> delegates = loadPteModels(path, options);
    if (delegates.size() > 1) {
      for (EmbeddedModel &d : delegates) {
        if (options.checkScopes)
          checkValueScopes(*d.model, path);
        models.push_back(std::move(d.model));
      }
      return models;
    }
  }
  models.push_back(loadModel(path, options));
  return models;
}

void saveModel(const Model &model, const std::string &path, const SaveOptions &options) {
  fs::path out(path);
  ModelFormat format = detectFormat(path);
  if (format == ModelFormat::Unknown)
    failExpected(path, "", "an output path ending in " + formatExtensionsText(true),
                 "'" + out.filename().string() + "'");
  const FormatRow &row = rowOf(format);
  if (!row.info.writable)
    throw InputError::at(path, "",
                         "cannot write " + std::string(row.info.name) + " files; write one of " +
                             formatExtensionsText(true));

  OutputOptions policy;
  policy.force = options.force;
  policy.allowStream = false;
  policy.kind = row.info.directory ? OutputKind::Directory : OutputKind::File;
  policy.alsoAvoid = modelInputPaths(model);
  // Cheap refusals first, before anything is serialized.
  checkOutput(path, policy);
  std::string why = unwritableReason(model);
  if (!why.empty())
    throw InputError::at(path, "", "cannot write this model: " + why);
  row.save(model, path, policy);
}

} // namespace anefit
