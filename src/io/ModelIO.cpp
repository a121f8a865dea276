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
  WeightResolver(std::string modelDir, std::string referrer, bool open)
      : modelDir_(std::move(modelDir)), referrer_(std::move(referrer)), open_(open) {}

  std::shared_ptr<const BlobStore> operator()(const std::string &fileName) {
    std::string path = resolveWeightPath(modelDir_, fileName, referrer_);
    std::shared_ptr<const BlobStore> store;
    if (open_) {
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

ModelFormat detectFormat(const std::string &path) {
  std::error_code ec;
  fs::path p(path);
  std::string ext = lowerExtension(p);
  if (fs::is_directory(p, ec))
    return isPackageDirectory(path) || ext == ".mlpackage" ? ModelFormat::MLPackage
                                                           : ModelFormat::Unknown;
  if (ext == ".mlpackage")
    return ModelFormat::MLPackage;
  if (ext == ".mlmodel")
    return ModelFormat::MLModel;
  if (ext == ".mil")
    return ModelFormat::MilText;
  if (ext == ".pte")
    return ModelFormat::Pte;
  return ModelFormat::Unknown;
}

/// "model.pte#2" -> ("model.pte", 2); other paths unchanged.
std::pair<std::string, std::optional<size_t>> splitPteSelector(const std::string &path) {
  size_t hash = path.rfind('#');
  if (hash == std::string::npos || hash + 1 >= path.size() || hash + 8 < path.size())
    return {path, std::nullopt};
  std::string base = path.substr(0, hash);
  if (lowerExtension(base) != ".pte" ||
      path.find_first_not_of("0123456789", hash + 1) != std::string::npos)
    return {path, std::nullopt};
  return {base, std::stoul(path.substr(hash + 1))};
}

std::unique_ptr<Model> loadModel(const std::string &path, const LoadOptions &options) {
  auto [ptePath, selector] = splitPteSelector(path);
  if (selector || detectFormat(path) == ModelFormat::Pte) {
    std::vector<EmbeddedModel> models = loadPteModels(ptePath, options);
    if (models.empty())
      throw InputError::at(ptePath, "", "no Core ML delegate in this ExecuTorch program");
    size_t pick = selector.value_or(0);
    if (!selector && models.size() > 1)
      throw InputError::at(ptePath, "",
                           "holds " + std::to_string(models.size()) +
                               " Core ML delegates; pick one as " + ptePath + "#0 .. " + ptePath +
                               "#" + std::to_string(models.size() - 1) + " ('anefit show " +
                               ptePath + "' lists them)");
    if (pick >= models.size())
      failExpected(ptePath, "delegate selector '#" + std::to_string(pick) + "'",
                   "0 .. " + std::to_string(models.size() - 1), std::to_string(pick));
    return std::move(models[pick].model);
  }
  std::error_code ec;
  if (!fs::exists(path, ec))
    throw InputError::at(path, "", "no such file or directory");
  bool isDir = fs::is_directory(path, ec);
  std::unique_ptr<Model> model;
  std::unique_ptr<WeightResolver> resolver;

  switch (detectFormat(path)) {
  case ModelFormat::MLPackage: {
    PackageLayout layout = openPackage(path);
    resolver =
        std::make_unique<WeightResolver>(layout.modelDir, layout.modelFile, options.openWeights);
    std::vector<uint8_t> bytes = readFileBytes(layout.modelFile);
    model = parseModelProto(bytes, layout.modelFile,
                            [&](const std::string &name) { return (*resolver)(name); });
    break;
  }
  case ModelFormat::MLModel: {
    if (isDir)
      failExpected(path, "", "a .mlmodel file", "a directory");
    resolver = std::make_unique<WeightResolver>(fs::path(path).parent_path().string(), path,
                                                options.openWeights);
    std::vector<uint8_t> bytes = readFileBytes(path);
    model =
        parseModelProto(bytes, path, [&](const std::string &name) { return (*resolver)(name); });
    break;
  }
  case ModelFormat::MilText: {
    if (isDir)
      failExpected(path, "", "a .mil text file", "a directory");
    resolver = std::make_unique<WeightResolver>(fs::path(path).parent_path().string(), path,
                                                options.openWeights);
    std::vector<uint8_t> bytes = readFileBytes(path);
    std::string_view text(reinterpret_cast<const char *>(bytes.data()), bytes.size());
    model = parseModelText(text, path, [&](const std::string &name) { return (*resolver)(name); });
    break;
  }
  case ModelFormat::Pte: // handled above
    break;
  case ModelFormat::Unknown:
    if (isDir)
      failExpected(path, "", "a model (a .mlpackage directory with a Manifest.json)",
                   "a directory without a Manifest.json");
    failExpected(path, "", "a model file ending in .mlpackage, .mlmodel, .mil or .pte",
                 "'" + fs::path(path).filename().string() + "'");
  }
  if (!model)
    throw InputError::at(path, "", "no model could be read");
  model->sourcePath = path;
  for (const auto &[name, store] : resolver->seen())
    model->weightFiles.emplace(name, store);
  return model;
}

void saveModel(const Model &model, const std::string &path, const SaveOptions &options) {
  std::error_code ec;
  fs::path out(path);
  ModelFormat format = detectFormat(path);
  if (format == ModelFormat::Unknown)
    failExpected(path, "", "an output path ending in .mlpackage, .mlmodel or .mil",
                 "'" + out.filename().string() + "'");
  if (format == ModelFormat::Pte)
    throw InputError::at(path, "", "writing ExecuTorch .pte files is not supported");

  for (const std::string &in : inputPaths(model))
    if (pathContains(path, in) || pathContains(in, path))
      throw InputError::at(path, "", "refusing to write over the input " + in);
  bool exists = fs::exists(fs::symlink_status(out, ec));
  if (exists && !options.overwrite)
    throw InputError::at(path, "", "output already exists; not replacing it");
  if (exists && format != ModelFormat::MLPackage && fs::is_directory(out, ec))
    failExpected(path, "", "a file to replace", "a directory");

  switch (format) {
  case ModelFormat::MLPackage:
    writePackage(path, [&](WeightWriter &weights) { return serializeModelProto(model, &weights); });
    return;
  case ModelFormat::MLModel: {
    std::string bytes;
    try {
      bytes = serializeModelProto(model, nullptr);
    } catch (const InputError &e) {
      // The serializer names the op; the user also needs to know which output.
      throw InputError::at(path, "", e.what());
    }
    writeFileAtomically(out, bytes);
    return;
  }
  case ModelFormat::MilText:
    saveMilText(model, out);
    return;
  default:
    return;
  }
}

} // namespace anefit
