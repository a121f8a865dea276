//===- ModelIO.cpp - Reading and writing models in every format -----------===//
//
// Dispatches on the format, resolves weight-file names for each container
// ("@model_path" is the directory of the model protobuf, or of the .mil file)
// and makes every write atomic: outputs are assembled under a temporary
// sibling name and renamed into place, and nothing is written over a file the
// model is being read from.
//
//===----------------------------------------------------------------------===//
#include "io/ModelIO.h"

#include "io/MilProto.h"
#include "io/Package.h"
#include "io/WeightFile.h"
#include "ir/AsmParser.h"
#include "ir/AsmPrinter.h"
#include "support/Error.h"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <optional>
#include <random>
#include <set>
#include <sstream>

namespace fs = std::filesystem;

namespace anefit {
namespace {

std::string lowerExtension(const fs::path &p) {
  // "Foo.mlpackage/" has an empty filename; look at the directory name.
  fs::path name = p.has_filename() ? p.filename() : p.parent_path().filename();
  std::string ext = name.extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return ext;
}

std::vector<uint8_t> readFileBytes(const std::string &path) {
  std::error_code ec;
  uint64_t size = fs::file_size(path, ec);
  if (ec)
    throw InputError::at(path, "", "cannot read file: " + ec.message());
  std::ifstream in(path, std::ios::binary);
  if (!in)
    throw InputError::at(path, "", "cannot open file");
  // The size comes from the file system, not from the contents.
  std::vector<uint8_t> bytes(size);
  if (size)
    in.read(reinterpret_cast<char *>(bytes.data()), static_cast<std::streamsize>(size));
  if (!in)
    throw InputError::at(path, "", "cannot read file");
  return bytes;
}

std::string randomSuffix() {
  std::random_device rd;
  char buf[20];
  std::snprintf(buf, sizeof buf, "%08x%08x", rd(), rd());
  return buf;
}

/// Opens weight files for one model. Names are validated even when weights
/// are not opened, so a hostile name is reported by every command.
class WeightResolver {
public:
  WeightResolver(std::string modelDir, std::string referrer, const LoadOptions &options)
      : modelDir_(std::move(modelDir)), referrer_(std::move(referrer)), open_(options.openWeights),
        allowMissing_(options.allowMissingWeights) {}

  std::shared_ptr<const BlobStore> operator()(const std::string &fileName) {
    std::string path = resolveWeightPath(modelDir_, fileName, referrer_);
    std::shared_ptr<const BlobStore> store;
    std::error_code ec;
    if (open_ && !(allowMissing_ && !fs::is_regular_file(path, ec))) {
      auto it = byPath_.find(path);
      if (it != byPath_.end()) {
        store = it->second;
      } else {
        store = WeightFile::open(path);
        byPath_.emplace(path, store);
      }
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

/// Writes MIL text. Blob constants must be readable from "@model_path" = the
/// directory of the .mil file: if they already are (the text is written next
/// to the weights it uses), the references are kept; otherwise their bytes
/// are copied into weights/<stem>.bin beside the text and the text refers to
/// that file.
void saveMilText(const Model &model, const fs::path &path) {
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
  if (blobs.empty() || inPlace) {
    std::ostringstream text;
    printModel(model, text);
    writeFileAtomically(path, text.str());
    return;
  }

  std::string stem = path.stem().string();
  std::string fileName = "@model_path/weights/" + stem + ".bin";
  fs::path weightsDir = dir / "weights";
  fs::path weightPath = weightsDir / (stem + ".bin");
  std::error_code ec;
  fs::create_directories(weightsDir, ec);
  if (ec)
    throw InputError::at(weightsDir.string(), "", "cannot create directory: " + ec.message());
  for (const Constant *c : blobs)
    if (c->blob.store && fs::equivalent(c->blob.store->path(), weightPath, ec))
      throw InputError::at(path.string(), "",
                           "refusing to write over the input weight file " + weightPath.string());
  fs::path tmpWeights = weightsDir / ("." + stem + ".bin.tmp-" + randomSuffix());

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
    std::shared_ptr<const BlobStore> newStore;
    {
      WeightWriter writer(tmpWeights.string());
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
    fs::rename(tmpWeights, weightPath);
    newStore = WeightFile::open(weightPath.string());
    for (auto &[c, ref] : saved) {
      uint64_t offset = copied.at({ref.store.get(), ref.offset});
      c->blob = BlobRef{fileName, offset, newStore};
    }
    std::ostringstream text;
    printModel(model, text);
    restore();
    writeFileAtomically(path, text.str());
  } catch (...) {
    restore();
    fs::remove(tmpWeights, ec);
    throw;
  }
}

/// Paths the model reads from: its source and its weight files.
std::vector<std::string> inputPaths(const Model &model) {
  std::vector<std::string> paths;
  if (!model.sourcePath.empty())
    paths.push_back(model.sourcePath);
  for (const auto &[name, store] : model.weightFiles)
    if (store)
      paths.push_back(store->path());
  return paths;
}

} // namespace

void writeFileAtomically(const std::string &pathText, std::string_view bytes) {
  fs::path path(pathText);
  fs::path parent = path.parent_path().empty() ? fs::path(".") : path.parent_path();
  std::error_code ec;
  if (!fs::is_directory(parent, ec))
    throw InputError::at(path.string(), "",
                         "cannot write: directory " + parent.string() + " does not exist");
  fs::path tmp = parent / ("." + path.filename().string() + ".tmp-" + randomSuffix());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    out.close();
    if (!out) {
      fs::remove(tmp, ec);
      throw InputError::at(path.string(), "", "cannot write file");
    }
  }
  fs::rename(tmp, path, ec);
  if (ec) {
    fs::remove(tmp, ec);
    throw InputError::at(path.string(), "", "cannot write file: " + ec.message());
  }
}

//===----------------------------------------------------------------------===//
// The formats of ModelFormats.def
//===----------------------------------------------------------------------===//

namespace formats {

#define FORMAT(Id, name, extensions, directory, detect, load, save, note)                          \
  bool detect(const std::string &path);                                                            \
  std::unique_ptr<Model> load(const std::string &path, const LoadOptions &options);                \
  void save(const Model &model, const std::string &path);
#include "io/ModelFormats.def"

bool byExtensionOnly(const std::string &) { return false; }

void cannotSave(const Model &, const std::string &path) {
  failExpected(path, "", "an output path ending in " + formatExtensionsText(true),
               "'" + fs::path(path).filename().string() + "'");
}

bool detectPackage(const std::string &path) { return isPackageDirectory(path); }

/// Reads a file in full, with the model's weight files resolved next to it.
template <typename Parse>
std::unique_ptr<Model> loadFile(const std::string &path, const std::string &expected,
                                const LoadOptions &options, Parse &&parse) {
  std::error_code ec;
  if (fs::is_directory(path, ec))
    failExpected(path, "", expected, "a directory");
  WeightResolver resolver(fs::path(path).parent_path().string(), path, options);
  std::vector<uint8_t> bytes = readFileBytes(path);
  std::unique_ptr<Model> model =
      parse(bytes, [&](const std::string &name) { return resolver(name); });
  for (const auto &[name, store] : resolver.seen())
    model->weightFiles.emplace(name, store);
  model->sourcePath = path;
  return model;
}

std::unique_ptr<Model> loadPackage(const std::string &path, const LoadOptions &options) {
  PackageLayout layout = openPackage(path);
  WeightResolver resolver(layout.modelDir, layout.modelFile, options);
  std::vector<uint8_t> bytes = readFileBytes(layout.modelFile);
  std::unique_ptr<Model> model = parseModelProto(
      bytes, layout.modelFile, [&](const std::string &name) { return resolver(name); });
  for (const auto &[name, store] : resolver.seen())
    model->weightFiles.emplace(name, store);
  model->sourcePath = path;
  return model;
}

std::unique_ptr<Model> loadModelFile(const std::string &path, const LoadOptions &options) {
  return loadFile(path, "a .mlmodel file", options,
                  [&](const std::vector<uint8_t> &bytes, const WeightOpener &open) {
                    return parseModelProto(bytes, path, open);
                  });
}

std::unique_ptr<Model> loadMilTextFile(const std::string &path, const LoadOptions &options) {
  return loadFile(path, "a .mil text file", options,
                  [&](const std::vector<uint8_t> &bytes, const WeightOpener &open) {
                    std::string_view text(reinterpret_cast<const char *>(bytes.data()),
                                          bytes.size());
                    return parseModelText(text, path, open, options.text);
                  });
}

void savePackage(const Model &model, const std::string &path) {
  writePackage(path, [&](WeightWriter &weights) { return serializeModelProto(model, &weights); });
}

void saveModelFile(const Model &model, const std::string &path) {
  std::string bytes;
  try {
    bytes = serializeModelProto(model, nullptr);
  } catch (const InputError &e) {
    // The serializer names the op; the user also needs to know which output.
    throw InputError::at(path, "", e.what());
  }
  writeFileAtomically(path, bytes);
}

void saveMilTextFile(const Model &model, const std::string &path) { saveMilText(model, path); }

} // namespace formats

namespace {

using LoadFn = std::unique_ptr<Model> (*)(const std::string &, const LoadOptions &);
using SaveFn = void (*)(const Model &, const std::string &);
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

std::string formatExtensionsText(bool writable) {
  std::vector<std::string> exts;
  for (const ModelFormatInfo &info : modelFormats()) {
    if (writable && !info.writable)
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
    text += (i == 0 ? "" : i + 1 == exts.size() ? " or " : ", ") + exts[i];
  return text;
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
  WeightResolver resolver(modelDir, origin, options);
  std::unique_ptr<Model> model = parseModelText(
      text, origin, [&](const std::string &name) { return resolver(name); }, options.text);
  for (const auto &[name, store] : resolver.seen())
    model->weightFiles.emplace(name, store);
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
  std::error_code ec;
  if (!claimed && !fs::exists(path, ec))
    throw InputError::at(path, "", "no such file or directory");
  if (format == ModelFormat::Unknown)
    format = detectFormat(path);
  if (format == ModelFormat::Unknown) {
    if (fs::is_directory(path, ec))
      failExpected(path, "", "a model (a .mlpackage directory with a Manifest.json)",
                   "a directory without a Manifest.json");
    failExpected(path, "", "a model file ending in " + formatExtensionsText(),
                 "'" + fs::path(path).filename().string() + "'");
  }
  std::unique_ptr<Model> model = rowOf(format).load(path, options);
  if (!model)
    throw InputError::at(path, "", "no model could be read");
  return model;
}

void saveModel(const Model &model, const std::string &path, const SaveOptions &options) {
  std::error_code ec;
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

  for (const std::string &in : inputPaths(model))
    if (pathContains(path, in) || pathContains(in, path))
      throw InputError::at(path, "", "refusing to write over the input " + in);
  bool exists = fs::exists(fs::symlink_status(out, ec));
  if (exists && !options.overwrite)
    throw InputError::at(path, "", "output already exists; not replacing it");
  if (exists && !row.info.directory && fs::is_directory(out, ec))
    failExpected(path, "", "a file to replace", "a directory");
  row.save(model, path);
}

} // namespace anefit
