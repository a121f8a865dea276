//===- Package.cpp - The .mlpackage directory container -------------------===//
//
// Manifest validation is strict about anything that could move a read or a
// write outside the package (absolute paths, "..", symbolic links), and
// lenient about what anefit does not use (extra items, unknown files).
//
//===----------------------------------------------------------------------===//
#include "io/Package.h"

#include "support/Error.h"
#include "support/FileSystem.h"
#include "support/Json.h"

#include <nlohmann/json.hpp>

#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <random>
#include <unistd.h>

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace anefit {
namespace {

/// Manifests written by Core ML tools are a few hundred bytes; anything
/// beyond this is not a manifest and is not read into memory.
constexpr uint64_t kMaxManifestBytes = 1 << 20;

constexpr const char *kAuthor = "com.apple.CoreML";
constexpr const char *kModelName = "model.mlmodel";
constexpr const char *kWeightsName = "weights";
constexpr const char *kWeightFileName = "weight.bin";
constexpr const char *kModelPathPrefix = "@model_path/";

/// Shortens a value found in a file for a one-line message.
std::string quote(std::string_view s) {
  std::string out = "'";
  for (char c : s.substr(0, 80)) {
    unsigned char u = static_cast<unsigned char>(c);
    out += (u < 0x20 || u == 0x7f) ? '?' : c;
  }
  if (s.size() > 80)
    out += "...";
  return out + "'";
}

const char *jsonTypeName(const json &j) { return j.type_name(); }

/// Parses "major.minor.patch" with non-negative decimal parts.
bool parseVersion(const std::string &s, int v[3]) {
  size_t pos = 0;
  for (int i = 0; i < 3; ++i) {
    if (pos >= s.size() || !std::isdigit(static_cast<unsigned char>(s[pos])))
      return false;
    long long n = 0;
    while (pos < s.size() && std::isdigit(static_cast<unsigned char>(s[pos]))) {
      n = n * 10 + (s[pos++] - '0');
      if (n > 1000000)
        return false;
    }
    v[i] = static_cast<int>(n);
    if (i < 2) {
      if (pos >= s.size() || s[pos] != '.')
        return false;
      ++pos;
    }
  }
  return pos == s.size();
}

/// Checks a relative path from a manifest or a program and returns it
/// normalised. Rejects absolute paths, "..", empty parts and NUL bytes: such
/// a path could leave the directory it is resolved against.
std::optional<std::string> safeRelativePath(std::string_view p) {
  if (p.empty() || p.front() == '/' || p.find('\0') != std::string_view::npos ||
      p.find('\\') != std::string_view::npos)
    return std::nullopt;
  fs::path path{std::string(p)};
  for (const fs::path &part : path)
    if (part == "..")
      return std::nullopt;
  std::string norm = path.lexically_normal().generic_string();
  if (norm.empty() || norm == "." || norm.starts_with("/"))
    return std::nullopt;
  while (norm.ends_with("/"))
    norm.pop_back();
  return norm;
}

std::string stringField(const json &entry, const char *key, const std::string &fileName,
                        const std::string &place) {
  auto it = entry.find(key);
  if (it == entry.end())
    failExpected(fileName, place, std::string("key '") + key + "'", "none");
  if (!it->is_string())
    failExpected(fileName, place + "." + key, "a string", jsonTypeName(*it));
  return it->get<std::string>();
}

/// Canonical form of an existing path (symbolic links resolved), or the
/// lexical absolute form if it does not exist.
fs::path canonicalOrAbsolute(const fs::path &p) {
  std::error_code ec;
  fs::path c = fs::weakly_canonical(p, ec);
  if (ec)
    return fs::absolute(p).lexically_normal();
  return c;
}

bool isWithin(const fs::path &dir, const fs::path &p) {
  auto rel = p.lexically_relative(dir);
  if (rel.empty())
    return false;
  auto first = *rel.begin();
  return first != ".." && !rel.is_absolute();
}

std::string manifestText(const std::string &modelId, const std::string &weightsId) {
  json doc;
  doc["fileFormatVersion"] = "1.0.0";
  doc["rootModelIdentifier"] = modelId;
  doc["itemInfoEntries"][modelId] = {{"author", kAuthor},
                                     {"description", "CoreML Model Specification"},
                                     {"name", kModelName},
                                     {"path", std::string(kAuthor) + "/" + kModelName}};
  doc["itemInfoEntries"][weightsId] = {{"author", kAuthor},
                                       {"description", "CoreML Model Weights"},
                                       {"name", kWeightsName},
                                       {"path", std::string(kAuthor) + "/" + kWeightsName}};
  return dumpJson(doc, 4) + "\n";
}

} // namespace

const Manifest::Item &Manifest::rootItem() const {
  for (const Item &item : items)
    if (item.identifier == rootModelIdentifier)
      return item;
  // parseManifest guarantees the root entry exists.
  throw InputError("manifest has no root model entry");
}

Manifest parseManifest(std::string_view text, const std::string &fileName) {
  json doc = parseJson(text, fileName);
  if (doc.is_discarded()) {
    // Re-parse with exceptions only to get nlohmann's position information.
    try {
      json ignored = json::parse(text);
      (void)ignored;
    } catch (const json::exception &e) {
      std::string msg = e.what();
      auto colon = msg.find("] ");
      throw InputError::at(fileName, "",
                           "invalid JSON: " +
                               (colon == std::string::npos ? msg : msg.substr(colon + 2)));
    }
    throw InputError::at(fileName, "", "invalid JSON");
  }
  if (!doc.is_object())
    failExpected(fileName, "", "a JSON object", jsonTypeName(doc));

  Manifest m;
  m.fileFormatVersion = stringField(doc, "fileFormatVersion", fileName, "manifest");
  int v[3];
  if (!parseVersion(m.fileFormatVersion, v))
    failExpected(fileName, "fileFormatVersion", "a version 'major.minor.patch'",
                 quote(m.fileFormatVersion));
  if (v[0] > 1 || (v[0] == 1 && (v[1] > 0 || v[2] > 0)))
    failExpected(fileName, "fileFormatVersion", "a version no newer than 1.0.0",
                 quote(m.fileFormatVersion));

  m.rootModelIdentifier = stringField(doc, "rootModelIdentifier", fileName, "manifest");

  auto entries = doc.find("itemInfoEntries");
  if (entries == doc.end())
    failExpected(fileName, "manifest", "key 'itemInfoEntries'", "none");
  if (!entries->is_object())
    failExpected(fileName, "itemInfoEntries", "an object", jsonTypeName(*entries));

  for (auto it = entries->begin(); it != entries->end(); ++it) {
    std::string place = "itemInfoEntries." + it.key();
    if (!it->is_object())
      failExpected(fileName, place, "an object", jsonTypeName(*it));
    Manifest::Item item;
    item.identifier = it.key();
    item.author = stringField(*it, "author", fileName, place);
    item.description = stringField(*it, "description", fileName, place);
    item.name = stringField(*it, "name", fileName, place);
    std::string path = stringField(*it, "path", fileName, place);
    std::optional<std::string> safe = safeRelativePath(path);
    if (!safe)
      throw InputError::at(fileName, place + ".path",
                           "a Manifest path that escapes the package: expected a relative "
                           "path inside Data/, found " +
                               quote(path));
    item.path = *safe;
    m.items.push_back(std::move(item));
  }

  bool found = false;
  for (const Manifest::Item &item : m.items)
    found |= item.identifier == m.rootModelIdentifier;
  if (!found)
    failExpected(fileName, "rootModelIdentifier", "the identifier of an itemInfoEntries entry",
                 quote(m.rootModelIdentifier));
  return m;
}

bool isPackageDirectory(const std::string &path) {
  std::error_code ec;
  return fs::is_directory(path, ec) && fs::is_regular_file(fs::path(path) / "Manifest.json", ec);
}

PackageLayout openPackage(const std::string &dir) {
  FileKind kind = fileKindOf(dir);
  if (kind == FileKind::Missing)
    throw InputError::at(dir, "", "no such file or directory");
  if (kind != FileKind::Directory)
    failExpected(dir, "", "a .mlpackage directory", fileKindName(kind));
  fs::path root(dir);
  fs::path manifestPath = root / "Manifest.json";
  std::string manifestName = manifestPath.string();
  if (fileKindOf(manifestName, /*followLinks=*/false) == FileKind::Missing)
    failExpected(dir, "", "a package directory with a Manifest.json", "no Manifest.json");
  // The whole package is an input: nothing may be written into it.
  trackInput(dir);
  InputOptions manifestOptions;
  manifestOptions.within = dir;
  manifestOptions.maxBytes = kMaxManifestBytes;
  manifestOptions.track = false;
  std::vector<uint8_t> bytes = readFileBytes(manifestName, manifestOptions);
  std::string text(bytes.begin(), bytes.end());

  PackageLayout layout;
  layout.root = dir;
  layout.manifest = parseManifest(text, manifestName);

  const Manifest::Item &rootItem = layout.manifest.rootItem();
  fs::path modelFile = root / "Data" / rootItem.path;
  layout.modelFile = modelFile.string();
  // A symbolic link inside the package may still point out of it. Files
  // are opened component by component without following links (see
  // InputOptions::within); this check names the manifest entry early.
  fs::path dataDir = canonicalOrAbsolute(root / "Data");
  if (!isWithin(dataDir, canonicalOrAbsolute(modelFile)))
    throw InputError::at(manifestName, "itemInfoEntries." + rootItem.identifier + ".path",
                         "a Manifest path that escapes the package: " + quote(rootItem.path) +
                             " leads outside Data/");
  FileKind modelKind = fileKindOf(layout.modelFile, /*followLinks=*/false);
  if (modelKind == FileKind::Missing)
    throw InputError::at(layout.modelFile, "", "no such file or directory");
  if (modelKind != FileKind::Regular && modelKind != FileKind::Symlink)
    failExpected(layout.modelFile, "", "a model file", fileKindName(modelKind));
  layout.modelDir = modelFile.parent_path().string();
  layout.weightsDir = (modelFile.parent_path() / kWeightsName).string();
  return layout;
}

std::string resolveWeightPath(const std::string &modelDir, const std::string &fileName,
                              const std::string &referrer) {
  std::string place = "weight file " + quote(fileName);
  if (!fileName.starts_with(kModelPathPrefix))
    failExpected(referrer, place, "a name starting with '@model_path/weights/'", quote(fileName));
  std::optional<std::string> rel =
      safeRelativePath(std::string_view(fileName).substr(std::strlen(kModelPathPrefix)));
  if (!rel || !rel->starts_with(std::string(kWeightsName) + "/"))
    throw InputError::at(referrer, place,
                         "a weight file name that escapes the weights directory: expected "
                         "'@model_path/weights/<name>'");
  fs::path base(modelDir.empty() ? "." : modelDir);
  fs::path resolved = base / *rel;
  if (!isWithin(canonicalOrAbsolute(base / kWeightsName), canonicalOrAbsolute(resolved)))
    throw InputError::at(referrer, place,
                         "a weight file name that escapes the weights directory: it leads "
                         "outside " +
                             (base / kWeightsName).string());
  return resolved.string();
}

std::string makeUuid() {
  std::random_device rd;
  uint8_t b[16];
  for (int i = 0; i < 16; i += 4) {
    uint32_t r = rd();
    for (int k = 0; k < 4; ++k)
      b[i + k] = static_cast<uint8_t>(r >> (8 * k));
  }
  b[6] = (b[6] & 0x0f) | 0x40; // version 4
  b[8] = (b[8] & 0x3f) | 0x80; // RFC 4122 variant
  char out[37];
  std::snprintf(out, sizeof out,
                "%02X%02X%02X%02X-%02X%02X-%02X%02X-%02X%02X-%02X%02X%02X%02X%02X%02X", b[0], b[1],
                b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14],
                b[15]);
  return out;
}

bool pathContains(const std::string &a, const std::string &b) {
  std::error_code ec;
  if (!fs::exists(a, ec))
    return false;
  if (fs::exists(b, ec) && fs::equivalent(a, b, ec))
    return true;
  // `b` may not exist yet (an output path): compare resolved forms.
  fs::path ca = canonicalOrAbsolute(a), cb = canonicalOrAbsolute(b);
  return ca == cb || (fs::is_directory(ca, ec) && isWithin(ca, cb));
}

PackageFiles buildPackageFiles(const PackageContentWriter &writeContent,
                               const WeightWriter::Sink &weightSink,
                               const std::string &weightName) {
  const std::string modelDir = std::string("Data/") + kAuthor;
  PackageFiles files;
  WeightWriter weights(weightSink, weightName);
  std::string modelBytes = writeContent(weights);
  weights.finish();
  if (weights.count() > 0)
    files.weightFile = modelDir + "/" + kWeightsName + "/" + kWeightFileName;
  files.small.emplace_back(modelDir + "/" + kModelName, std::move(modelBytes));
  files.small.emplace_back("Manifest.json", manifestText(makeUuid(), makeUuid()));
  return files;
}

void writePackage(const std::string &dest, const PackageContentWriter &writeContent,
                  const OutputOptions &options) {
  std::string trimmed = dest;
  while (trimmed.size() > 1 && trimmed.back() == '/')
    trimmed.pop_back();
  std::string name = fs::path(trimmed).filename().string();
  if (name.empty() || name == "." || name == "..")
    failExpected(dest, "", "a package path ending in a name", quote(dest));

  AtomicDirectory package(trimmed, options);
  const std::string weightsDir = std::string("Data/") + kAuthor + "/" + kWeightsName;
  const std::string weightPath = weightsDir + "/" + kWeightFileName;
  package.addDirectory(weightsDir);
  int fd = package.createFile(weightPath);
  std::string shown = dest + "/" + weightPath;
  PackageFiles files = buildPackageFiles(
      writeContent,
      [fd, shown](uint64_t offset, std::span<const uint8_t> bytes) {
        const uint8_t *p = bytes.data();
        size_t left = bytes.size();
        while (left > 0) {
          ssize_t n = ::pwrite(fd, p, left, static_cast<off_t>(offset));
          if (n < 0 && errno == EINTR)
            continue;
          if (n <= 0)
            throw InputError::at(shown, "", std::string("cannot write: ") + std::strerror(errno));
          p += n;
          offset += static_cast<uint64_t>(n);
          left -= static_cast<size_t>(n);
        }
      },
      shown);
  package.closeFile(fd);
  if (files.weightFile.empty())
    package.removeFile(weightPath);
  for (const auto &[path, bytes] : files.small)
    package.addFile(path, bytes);
  package.commit();
}

} // namespace anefit
