//===- FileSystem.h - Reading inputs and writing outputs safely -*- C++ -*-===//
//
// Every file anefit reads or writes goes through this module, so that one set
// of rules holds for every verb and format:
//
//  * Inputs are regular files. They are opened without blocking (a FIFO named
//    as a model cannot hang us) and checked with fstat; anything else is
//    refused with a message naming what was found. Below a container
//    directory (a package, the directory of a .mil or .mlmodel) no path
//    component may be a symbolic link. Large inputs are memory-mapped.
//  * Every input is remembered for the process (see InputScope). No output
//    may be, lie inside, or contain one of them.
//  * Outputs are written atomically: to a temporary sibling that is written,
//    fsync'ed, closed (each step checked) and renamed into place. Temporaries
//    are removed on failure and on SIGINT/SIGTERM/SIGHUP. Directory trees
//    (packages) are assembled the same way and swapped into place. Scratch
//    files for intermediate bytes have no name at all (ScratchFile).
//  * One output policy (checkOutput): an existing output is replaced only
//    with `force`; a character device, a FIFO or the process's own standard
//    streams ("-", /dev/stdout, /dev/fd/N) are written through, since that
//    is what a user naming them means; directories (for file outputs),
//    block devices and sockets are refused.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace anefit {

//===----------------------------------------------------------------------===//
// File kinds
//===----------------------------------------------------------------------===//

enum class FileKind {
  Missing,
  Regular,
  Directory,
  Symlink,
  Fifo,
  Socket,
  CharDevice,
  BlockDevice,
  Other
};

/// "a regular file", "a directory", "a FIFO", ... for messages.
const char *fileKindName(FileKind kind);

/// The kind of `path`; with `followLinks` false a symbolic link is Symlink.
/// Never blocks and never throws (an unreadable path is Missing).
FileKind fileKindOf(const std::string &path, bool followLinks = true);

//===----------------------------------------------------------------------===//
// Inputs
//===----------------------------------------------------------------------===//

/// Options for opening an input file.
struct InputOptions {
  /// A directory the file lies in that the caller trusts (a package root, a
  /// model's directory). Every component of the path below it is opened
  /// without following symbolic links, so neither a linked file nor a linked
  /// directory can lead out of it. Empty: only the kind of the file itself
  /// is checked (a path the user named may be a link).
  std::string within;
  /// Refuse files larger than this many bytes (0: no limit).
  uint64_t maxBytes = 0;
  /// Remember the file as an input of the process (checkOutput refuses it).
  bool track = true;
};

/// Advises huge pages for the mapped memory holding `data` (from 8 MB on):
/// pages first read through it come in as 2 MB folios where the kernel and
/// file system allow, and weights stream faster. Advice only; memory that is
/// not a mapping is left as it is.
void adviseHugePages(const void *data, size_t size);

/// A read-only view of a whole regular file, memory-mapped when not empty;
/// from 8 MB on with huge pages advised (pages first read through the mapping
/// come in as 2 MB folios where the kernel and file system allow).
class MappedFile {
public:
  /// Opens, checks and maps `path`. Throws InputError naming the file and
  /// what was found ("expected a regular file, found a FIFO").
  static std::shared_ptr<const MappedFile> open(const std::string &path,
                                                const InputOptions &options = {});
  ~MappedFile();
  MappedFile(const MappedFile &) = delete;
  MappedFile &operator=(const MappedFile &) = delete;

  const std::string &path() const { return path_; }
  std::span<const uint8_t> bytes() const { return {data_, size_}; }
  std::string_view text() const { return {reinterpret_cast<const char *>(data_), size_}; }
  uint64_t size() const { return size_; }

private:
  MappedFile() = default;
  std::string path_;
  const uint8_t *data_ = nullptr;
  size_t size_ = 0;
  void *mapping_ = nullptr;
};

/// Reads a whole regular file into memory (small files: manifests, JSON).
std::vector<uint8_t> readFileBytes(const std::string &path, const InputOptions &options = {});

/// Remembers `path` (a file or a directory such as a package) as an input
/// without opening it. Inputs are only remembered inside an InputScope.
void trackInput(const std::string &path);

/// The inputs remembered so far, in canonical form.
std::vector<std::string> trackedInputs();

/// Scopes input tracking: while one is alive every input opened is
/// remembered, and forgotten when it ends. Each verb runs in one (as should
/// each call of an embedding API); outside any scope only the paths a writer
/// is given (OutputOptions::alsoAvoid) are avoided.
class InputScope {
public:
  InputScope();
  ~InputScope();
  InputScope(const InputScope &) = delete;
  InputScope &operator=(const InputScope &) = delete;

private:
  size_t mark_;
};

//===----------------------------------------------------------------------===//
// Output policy
//===----------------------------------------------------------------------===//

enum class OutputKind { File, Directory };

struct OutputOptions {
  /// Replace an existing output.
  bool force = false;
  /// What is written: a file, or a directory tree (a package).
  OutputKind kind = OutputKind::File;
  /// Accept "-", /dev/stdout, devices and FIFOs, written through. Only for
  /// outputs that make sense as a stream (text, JSON, a single archive).
  bool allowStream = true;
  /// Further paths the output must stay clear of, besides tracked inputs.
  std::vector<std::string> alsoAvoid;

  /// Options that replace an existing output.
  static OutputOptions replacing() {
    OutputOptions o;
    o.force = true;
    return o;
  }
  static OutputOptions withForce(bool force) {
    OutputOptions o;
    o.force = force;
    return o;
  }
};

/// How checkOutput decided an output is to be written.
enum class OutputMode {
  Create,  ///< nothing there yet: atomic create
  Replace, ///< an existing file or directory, replaced atomically (force)
  Stream,  ///< a device, FIFO or standard stream, written through
};

struct OutputTarget {
  OutputMode mode = OutputMode::Create;
  /// Where the atomic write happens: `path` with a symbolic link in its last
  /// component resolved (the link is kept and its target replaced).
  std::string path;
  /// For Stream: a descriptor of the process to write to (1, 2, ...) or -1
  /// to open `path` for writing.
  int streamFd = -1;
};

/// Refuses (InputError) a path that is, lies inside or (with `around`)
/// contains a tracked input or one of `alsoAvoid`. Part of checkOutput; on
/// its own, without `around`, for directories about to be created to hold
/// outputs (split --emit-models DIR, the parent of fix -o).
void refuseInputOverlap(const std::string &path, const std::vector<std::string> &alsoAvoid = {},
                        bool around = true);

/// The output policy. Refuses an output that is, lies inside or contains an
/// input; an existing one without `force`; a directory where a file goes,
/// a block device or a socket; a missing parent directory. Throws InputError
/// naming the output.
OutputTarget checkOutput(const std::string &path, const OutputOptions &options = {});

/// Writes `bytes` to `path` under the output policy: atomically for files,
/// written through for streams. Reports write, fsync, close and rename
/// errors (a full disk is an error, not a success). Throws InputError.
void writeFileAtomically(const std::string &path, std::string_view bytes,
                         const OutputOptions &options = {});

/// A file being written under a temporary sibling name; commit() makes it
/// appear under its real name, destruction without commit() removes it.
class AtomicFile {
public:
  /// Checks the policy and creates the temporary. Throws InputError.
  explicit AtomicFile(const std::string &path, const OutputOptions &options = {});
  ~AtomicFile();
  AtomicFile(const AtomicFile &) = delete;
  AtomicFile &operator=(const AtomicFile &) = delete;

  /// Appends bytes. Throws InputError on a write error.
  void write(std::string_view bytes);
  void write(std::span<const uint8_t> bytes) {
    write(std::string_view(reinterpret_cast<const char *>(bytes.data()), bytes.size()));
  }
  /// Writes at an absolute offset (holes read back as zeros).
  void writeAt(uint64_t offset, std::span<const uint8_t> bytes);
  /// fsync, close and rename into place. Throws InputError.
  void commit();
  /// fsync, close and move to the first name `nameFor(0)`, `nameFor(1)`, ...
  /// (in the same directory) that does not exist yet, never replacing
  /// anything. The file stays provisional: it is removed by abort(), the
  /// destructor or a fatal signal until keep() is called. Returns the path.
  std::string commitAsNew(const std::function<std::string(int attempt)> &nameFor);
  /// Makes a file placed by commitAsNew permanent.
  void keep();
  /// Closes and removes the temporary (also done by the destructor).
  void abort();

  const std::string &path() const { return path_; }
  /// The temporary's path (where the bytes are until commit()).
  const std::string &tempPath() const { return tmp_; }

private:
  std::string path_;   ///< as the user named it, for messages
  std::string target_; ///< where it is renamed to
  std::string tmp_;
  std::string provisional_;
  int fd_ = -1;
  int slot_ = -1;
  bool stream_ = false;
  bool ownsFd_ = true;
  uint64_t offset_ = 0;
  int keepMode_ = -1;
};

/// A directory tree (a package) assembled under a temporary sibling name and
/// swapped into place by commit(); destruction without commit() removes it.
/// Files are created through addFile()/addDirectory() so that an interrupt
/// can remove each of them.
class AtomicDirectory {
public:
  explicit AtomicDirectory(const std::string &path, const OutputOptions &options = {});
  ~AtomicDirectory();
  AtomicDirectory(const AtomicDirectory &) = delete;
  AtomicDirectory &operator=(const AtomicDirectory &) = delete;

  /// Creates directory `rel` (and its parents) below the temporary root.
  void addDirectory(const std::string &rel);
  /// Writes a whole file at `rel` (fsync'ed). Throws InputError.
  void addFile(const std::string &rel, std::string_view bytes);
  /// Creates `rel` for writing and returns its descriptor (owned by this
  /// object, closed by closeFile or commit). Throws InputError.
  int createFile(const std::string &rel);
  /// fsyncs and closes a descriptor from createFile. Throws InputError.
  void closeFile(int fd);
  /// Removes a file created below the root before commit.
  void removeFile(const std::string &rel);
  /// The temporary root's path joined with `rel`.
  std::string tempPath(const std::string &rel = "") const;
  /// Swaps the tree into place (replacing an existing one). Throws InputError.
  void commit();

  const std::string &path() const { return path_; }

private:
  std::string path_;
  std::string target_;
  std::string tmp_;
  std::vector<int> slots_;
  std::vector<int> openFds_;
  bool committed_ = false;
};

/// Scratch space for intermediate bytes too large to hold in memory (the
/// weights of a payload being rebuilt inside a .pte). The file has no name:
/// it is created in the directory of `besides` (the output's file system,
/// where the user made room) and unlinked at once, with fatal signals held,
/// so neither an interrupt nor a kill can leave it behind; its space is
/// freed when the object goes. Bytes are written at offsets, then mapped.
class ScratchFile {
public:
  /// Throws InputError naming `besides` if the file cannot be created.
  explicit ScratchFile(const std::string &besides);
  ~ScratchFile();
  ScratchFile(const ScratchFile &) = delete;
  ScratchFile &operator=(const ScratchFile &) = delete;

  /// Writes at an absolute offset (holes read back as zeros). Throws
  /// InputError on a write error (a full disk) or after bytes().
  void writeAt(uint64_t offset, std::span<const uint8_t> bytes);
  /// Everything written so far, memory-mapped read-only; valid while this
  /// object lives. Writing ends here. Throws InputError.
  std::span<const uint8_t> bytes();
  uint64_t size() const { return size_; }

private:
  std::string name_; ///< for messages
  int fd_ = -1;
  uint64_t size_ = 0;
  void *mapping_ = nullptr;
  bool mapped_ = false;
};

/// `digits` random lower-case hex digits (for names of temporaries).
std::string randomHex(size_t digits);

/// Turns a name found in a model (a function name, an op name) into one
/// path component: '/', '\\', NUL, control bytes and a leading '.' become
/// '_', at most 200 bytes; never empty, never "." or "..".
std::string safeFileName(std::string_view name);

} // namespace anefit
