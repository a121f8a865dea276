//===- FileSystem.cpp - Reading inputs and writing outputs safely ---------===//
//
// POSIX underneath: open(2) with O_NONBLOCK and fstat(2) for inputs, openat(2)
// with O_NOFOLLOW to walk below a trusted directory, mmap(2) for contents;
// O_EXCL temporaries, fsync(2) and rename(2) (renameat2 RENAME_EXCHANGE for
// directories) for outputs. Temporaries live in a fixed table that a signal
// handler can walk with async-signal-safe calls only; scratch files are
// unlinked as they are created (O_TMPFILE where available).
//
//===----------------------------------------------------------------------===//
#include "support/FileSystem.h"

#include "support/Error.h"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <limits>
#include <mutex>
#include <random>

#include <time.h>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

namespace fs = std::filesystem;

namespace anefit {
namespace {

std::string errnoText(int err) { return std::strerror(err); }

FileKind kindOfMode(mode_t m) {
  if (S_ISREG(m))
    return FileKind::Regular;
  if (S_ISDIR(m))
    return FileKind::Directory;
  if (S_ISLNK(m))
    return FileKind::Symlink;
  if (S_ISFIFO(m))
    return FileKind::Fifo;
  if (S_ISSOCK(m))
    return FileKind::Socket;
  if (S_ISCHR(m))
    return FileKind::CharDevice;
  if (S_ISBLK(m))
    return FileKind::BlockDevice;
  return FileKind::Other;
}

std::string randomSuffix() {
  static std::mutex mutex;
  static std::mt19937_64 rng{std::random_device{}()};
  std::lock_guard<std::mutex> lock(mutex);
  char buf[20];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(rng()));
  return buf;
}

/// Canonical form of a path that may not exist yet: its longest existing
/// prefix resolved, the rest appended lexically.
std::string canonicalPath(const std::string &path) {
  std::error_code ec;
  fs::path c = fs::weakly_canonical(fs::path(path), ec);
  if (ec)
    c = fs::absolute(fs::path(path), ec).lexically_normal();
  std::string s = c.string();
  while (s.size() > 1 && s.back() == '/')
    s.pop_back();
  return s;
}

/// True if `b` is `a` or lies below it (both canonical).
bool sameOrInside(const std::string &a, const std::string &b) {
  if (a == b)
    return true;
  if (a == "/")
    return true;
  return b.size() > a.size() && b.compare(0, a.size(), a) == 0 && b[a.size()] == '/';
}

//===----------------------------------------------------------------------===//
// Input tracking
//===----------------------------------------------------------------------===//

std::mutex &inputsMutex() {
  static std::mutex m;
  return m;
}
std::vector<std::string> &inputsList() {
  static std::vector<std::string> v;
  return v;
}
/// Number of live InputScopes; inputs are only remembered inside one.
int gScopeDepth = 0;

//===----------------------------------------------------------------------===//
// Temporaries removed on a fatal signal
//===----------------------------------------------------------------------===//

constexpr int kTempSlots = 128;
constexpr size_t kTempPathMax = 4096;

struct TempSlot {
  std::atomic<int> state{0}; ///< 0 free, 1 being filled, 2 registered
  bool isDir = false;
  /// A directory whose whole tree is ours (the root of an AtomicDirectory):
  /// what lies below it is removed too, registered or not (a package saved
  /// into a kit being assembled has unregistered its files).
  bool tree = false;
  uint64_t seq = 0;
  char path[kTempPathMax];
};

TempSlot gTempSlots[kTempSlots];
std::atomic<uint64_t> gTempSeq{0};

/// A fatal signal is delivered to any thread that does not hold it back, so
/// the cleanup may run on one thread while another is creating a temporary
/// (with the signals held: FatalSignalsHeld). gCreating counts the threads
/// doing so; once gDying is set no creation starts, and the cleanup waits for
/// those under way to be registered before it walks the table.
std::atomic<int> gCreating{0};
std::atomic<bool> gDying{false};

/// Removes everything below the directory open as `fd`, then closes it.
/// Links are removed, never followed (unlinkat); subdirectories are opened
/// with O_NOFOLLOW. Only system calls: async-signal-safe. Entries removed
/// while reading may shift the listing, so it is read again until empty.
void removeTreeBelow(int fd, int depth) {
  struct Entry64 {
    uint64_t ino;
    int64_t off;
    unsigned short reclen;
    unsigned char type;
    char name[1];
  };
  alignas(8) char buf[2048];
  for (int pass = 0; pass < 64; ++pass) {
    ::lseek(fd, 0, SEEK_SET);
    bool any = false;
    long n;
    while ((n = ::syscall(SYS_getdents64, fd, buf, sizeof buf)) > 0) {
      for (long off = 0; off < n;) {
        const auto *e = reinterpret_cast<const Entry64 *>(buf + off);
        off += e->reclen;
        const char *name = e->name;
        if (name[0] == '.' && (name[1] == 0 || (name[1] == '.' && name[2] == 0)))
          continue;
        any = true;
        if (::unlinkat(fd, name, 0) == 0 || (errno != EISDIR && errno != EPERM))
          continue;
        if (depth < 32) {
          int sub = ::openat(fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
          if (sub >= 0)
            removeTreeBelow(sub, depth + 1);
        }
        ::unlinkat(fd, name, AT_REMOVEDIR);
      }
    }
    if (!any)
      break;
  }
  ::close(fd);
}

extern "C" void removeTempsOnSignal(int sig) {
  gDying.store(true);
  // Every thread counted in gCreating holds the signals back, so this one is
  // not among them: they finish (register) while it waits. At most a second,
  // in case one of them needs a lock this thread was interrupted holding.
  for (int waited = 0; gCreating.load() != 0 && waited < 10000; ++waited) {
    struct timespec nap = {0, 100000};
    ::nanosleep(&nap, nullptr);
  }
  // Files first, then directories from the most recently created up, so
  // each directory is empty when its turn comes. Only atomics, nanosleep,
  // unlink, rmdir, signal and raise: async-signal-safe.
  for (int i = 0; i < kTempSlots; ++i)
    if (gTempSlots[i].state.load() == 2 && !gTempSlots[i].isDir)
      ::unlink(gTempSlots[i].path);
  for (int i = 0; i < kTempSlots; ++i)
    if (gTempSlots[i].state.load() == 2 && gTempSlots[i].tree) {
      int fd = ::open(gTempSlots[i].path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
      if (fd >= 0)
        removeTreeBelow(fd, 0);
    }
  while (true) {
    int best = -1;
    for (int i = 0; i < kTempSlots; ++i)
      if (gTempSlots[i].state.load() == 2 && gTempSlots[i].isDir &&
          (best < 0 || gTempSlots[i].seq > gTempSlots[best].seq))
        best = i;
    if (best < 0)
      break;
    ::rmdir(gTempSlots[best].path);
    gTempSlots[best].state.store(0);
  }
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

/// Installs removeTempsOnSignal for each fatal signal whose action is the
/// default. Checked at every registration (not once): a child process or a
/// caller may have reset the action since.
void installSignalCleanup() {
  static std::mutex mutex;
  std::lock_guard<std::mutex> lock(mutex);
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) {
    struct sigaction old {};
    if (::sigaction(sig, nullptr, &old) != 0)
      continue;
    // Leave a handler or an "ignore" someone else installed alone (an
    // embedding Python, nohup).
    if (old.sa_handler != SIG_DFL || (old.sa_flags & SA_SIGINFO))
      continue;
    struct sigaction sa {};
    sa.sa_handler = removeTempsOnSignal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESETHAND;
    ::sigaction(sig, &sa, nullptr);
  }
}

/// Registers a temporary for removal on a fatal signal; -1 if the table is
/// full or the path too long (it is then only removed on normal failure).
int registerTemp(const std::string &path, bool isDir, bool tree = false) {
  installSignalCleanup();
  if (path.size() + 1 > kTempPathMax)
    return -1;
  for (int i = 0; i < kTempSlots; ++i) {
    int expected = 0;
    if (gTempSlots[i].state.compare_exchange_strong(expected, 1)) {
      std::memcpy(gTempSlots[i].path, path.c_str(), path.size() + 1);
      gTempSlots[i].isDir = isDir;
      gTempSlots[i].tree = isDir && tree;
      gTempSlots[i].seq = ++gTempSeq;
      gTempSlots[i].state.store(2);
      return i;
    }
  }
  return -1;
}

void unregisterTemp(int slot) {
  if (slot >= 0)
    gTempSlots[slot].state.store(0);
}

/// Holds SIGINT, SIGTERM and SIGHUP back while a temporary is created and
/// registered (or renamed and re-registered), so a signal never finds a
/// temporary on disk that the cleanup table does not know: not on this
/// thread (the signals wait), nor on another (the cleanup waits, gCreating).
/// The cleanup is installed first: a signal taken by another thread before
/// the first temporary was registered used to end the process at once.
class FatalSignalsHeld {
public:
  FatalSignalsHeld() {
    installSignalCleanup();
    sigset_t set;
    sigemptyset(&set);
    for (int sig : {SIGINT, SIGTERM, SIGHUP})
      sigaddset(&set, sig);
    ::pthread_sigmask(SIG_BLOCK, &set, &old_);
    gCreating.fetch_add(1);
    if (gDying.load()) {
      // Another thread is removing the temporaries and ending the process:
      // create nothing more, wait for the end.
      gCreating.fetch_sub(1);
      for (;;)
        ::pause();
    }
  }
  ~FatalSignalsHeld() {
    gCreating.fetch_sub(1);
    ::pthread_sigmask(SIG_SETMASK, &old_, nullptr);
  }
  FatalSignalsHeld(const FatalSignalsHeld &) = delete;
  FatalSignalsHeld &operator=(const FatalSignalsHeld &) = delete;

private:
  sigset_t old_;
};

//===----------------------------------------------------------------------===//
// Opening inputs
//===----------------------------------------------------------------------===//

std::string openErrorText(int err) {
  if (err == ENOENT)
    return "no such file or directory";
  if (err == EACCES)
    return "permission denied";
  return "cannot open: " + errnoText(err);
}

/// Opens `path` for reading and checks it is a regular file. Returns the
/// descriptor and fills `st`. Throws InputError.
int openInput(const std::string &path, const InputOptions &options, struct stat &st) {
  int fd = -1;
  constexpr int kFileFlags = O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY;
  fs::path rel;
  if (!options.within.empty()) {
    fs::path base = fs::path(options.within).lexically_normal();
    rel = fs::path(path).lexically_normal().lexically_relative(base);
    if (rel.empty() || *rel.begin() == ".." || rel.is_absolute())
      throw InputError::at(path, "", "expected a path inside " + options.within);
  }
  if (rel.empty()) {
    fd = ::open(path.c_str(), kFileFlags);
    if (fd < 0)
      throw InputError::at(path, "", openErrorText(errno));
  } else {
    int dir = ::open(options.within.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dir < 0)
      throw InputError::at(options.within, "", openErrorText(errno));
    std::vector<std::string> parts;
    for (const fs::path &p : rel)
      if (p != ".")
        parts.push_back(p.string());
    fs::path walked(options.within);
    for (size_t i = 0; i < parts.size(); ++i) {
      bool last = i + 1 == parts.size();
      walked /= parts[i];
      int flags = last ? kFileFlags | O_NOFOLLOW : O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC;
      int next = ::openat(dir, parts[i].c_str(), flags);
      int err = errno;
      if (next < 0) {
        struct stat lst {};
        bool isLink = ::fstatat(dir, parts[i].c_str(), &lst, AT_SYMLINK_NOFOLLOW) == 0 &&
                      S_ISLNK(lst.st_mode);
        ::close(dir);
        if (isLink)
          throw InputError::at(walked.string(), "",
                               "expected a file or directory inside " + options.within +
                                   ", found a symbolic link; anefit does not follow links "
                                   "inside a model");
        if (err == ENOENT)
          throw InputError::at(path, "", "no such file or directory");
        if (err == ENOTDIR)
          throw InputError::at(walked.string(), "",
                               std::string("expected a directory, found ") +
                                   fileKindName(kindOfMode(lst.st_mode)));
        throw InputError::at(walked.string(), "", openErrorText(err));
      }
      ::close(dir);
      dir = next;
    }
    fd = dir;
  }
  if (::fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    throw InputError::at(path, "", "cannot read: " + errnoText(err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    throw InputError::at(path, "",
                         std::string("expected a regular file, found ") +
                             fileKindName(kindOfMode(st.st_mode)));
  }
  uint64_t size = static_cast<uint64_t>(st.st_size);
  if (options.maxBytes && size > options.maxBytes) {
    ::close(fd);
    failExpected(path, "", "at most " + std::to_string(options.maxBytes) + " bytes",
                 std::to_string(size) + " bytes");
  }
  // Regular files never block; reads below may use the usual semantics.
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  return fd;
}

//===----------------------------------------------------------------------===//
// Writing
//===----------------------------------------------------------------------===//

/// Writes all of `bytes` at the current offset (or at `offset` if >= 0).
void writeAll(int fd, std::string_view bytes, const std::string &name, int64_t offset = -1) {
  const char *p = bytes.data();
  size_t left = bytes.size();
  while (left > 0) {
    size_t chunk = std::min<size_t>(left, size_t(1) << 30);
    ssize_t n =
        offset >= 0 ? ::pwrite(fd, p, chunk, static_cast<off_t>(offset)) : ::write(fd, p, chunk);
    if (n < 0) {
      if (errno == EINTR)
        continue;
      throw InputError::at(name, "", "cannot write: " + errnoText(errno));
    }
    if (n == 0)
      throw InputError::at(name, "", "cannot write: no progress");
    p += n;
    left -= static_cast<size_t>(n);
    if (offset >= 0)
      offset += n;
  }
}

/// fsync that tolerates descriptors that cannot be synced (pipes, ttys).
void syncFd(int fd, const std::string &name) {
  if (::fsync(fd) != 0 && errno != EINVAL && errno != EROFS && errno != ENOTSUP)
    throw InputError::at(name, "", "cannot write: " + errnoText(errno));
}

void syncDirectoryOf(const std::string &path) {
  std::string dir = fs::path(path).parent_path().string();
  int fd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd >= 0) {
    ::fsync(fd); // best effort: the data itself is already synced
    ::close(fd);
  }
}

/// The descriptor a standard-stream path names, or -1.
int standardStreamFd(const std::string &path) {
  if (path == "-" || path == "/dev/stdout")
    return 1;
  if (path == "/dev/stderr")
    return 2;
  for (const char *prefix : {"/dev/fd/", "/proc/self/fd/"}) {
    std::string_view p(prefix);
    if (path.size() > p.size() && path.compare(0, p.size(), p) == 0) {
      std::string num = path.substr(p.size());
      if (num.size() <= 6 && num.find_first_not_of("0123456789") == std::string::npos)
        return std::stoi(num);
    }
  }
  return -1;
}

bool renameExchange(const std::string &a, const std::string &b) {
#ifdef SYS_renameat2
  constexpr unsigned kExchange = 2; // RENAME_EXCHANGE
  return ::syscall(SYS_renameat2, AT_FDCWD, a.c_str(), AT_FDCWD, b.c_str(), kExchange) == 0;
#else
  errno = ENOSYS;
  return false;
#endif
}

} // namespace

//===----------------------------------------------------------------------===//
// Public API
//===----------------------------------------------------------------------===//

const char *fileKindName(FileKind kind) {
  switch (kind) {
  case FileKind::Missing:
    return "nothing";
  case FileKind::Regular:
    return "a regular file";
  case FileKind::Directory:
    return "a directory";
  case FileKind::Symlink:
    return "a symbolic link";
  case FileKind::Fifo:
    return "a FIFO";
  case FileKind::Socket:
    return "a socket";
  case FileKind::CharDevice:
    return "a character device";
  case FileKind::BlockDevice:
    return "a block device";
  case FileKind::Other:
    return "a special file";
  }
  return "a special file";
}

FileKind fileKindOf(const std::string &path, bool followLinks) {
  struct stat st {};
  int rc = followLinks ? ::stat(path.c_str(), &st) : ::lstat(path.c_str(), &st);
  if (rc != 0)
    return FileKind::Missing;
  return kindOfMode(st.st_mode);
}

/// Files from this size on are mapped with huge pages advised.
constexpr size_t kHugePageAdviceBytes = size_t(8) << 20;

void adviseHugePages(const void *data, size_t size) {
#if defined(MADV_HUGEPAGE)
  // Pages this process is the first to read then come into the page cache
  // as 2 MB folios, which the mapping covers with 2 MB TLB entries: weights
  // stream faster (one step of an fp16 LFM2-350M export, one thread: 13 %).
  // Pages already cached keep their size. Advice only: its result is moot.
  if (size < kHugePageAdviceBytes)
    return;
  uintptr_t page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  uintptr_t begin = reinterpret_cast<uintptr_t>(data) & ~(page - 1);
  uintptr_t end = reinterpret_cast<uintptr_t>(data) + size;
  (void)::madvise(reinterpret_cast<void *>(begin), end - begin, MADV_HUGEPAGE);
#else
  (void)data;
  (void)size;
#endif
}

std::shared_ptr<const MappedFile> MappedFile::open(const std::string &path,
                                                   const InputOptions &options) {
  struct stat st {};
  int fd = openInput(path, options, st);
  std::shared_ptr<MappedFile> file(new MappedFile());
  file->path_ = path;
  file->size_ = static_cast<size_t>(st.st_size);
  if (file->size_ > 0) {
    void *m = ::mmap(nullptr, file->size_, PROT_READ, MAP_PRIVATE, fd, 0);
    int err = errno;
    ::close(fd);
    if (m == MAP_FAILED)
      throw InputError::at(path, "", "cannot map file: " + errnoText(err));
    adviseHugePages(m, file->size_);
    file->mapping_ = m;
    file->data_ = static_cast<const uint8_t *>(m);
  } else {
    ::close(fd);
  }
  if (options.track)
    trackInput(path);
  return file;
}

MappedFile::~MappedFile() {
  if (mapping_)
    ::munmap(mapping_, size_);
}

std::vector<uint8_t> readFileBytes(const std::string &path, const InputOptions &options) {
  struct stat st {};
  int fd = openInput(path, options, st);
  std::vector<uint8_t> bytes;
  try {
    bytes.resize(static_cast<size_t>(st.st_size));
  } catch (const std::bad_alloc &) {
    ::close(fd);
    throw InputError::at(path, "",
                         "not enough memory to read " + std::to_string(st.st_size) + " bytes");
  }
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = ::read(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0) {
      int err = n < 0 ? errno : 0;
      ::close(fd);
      throw InputError::at(path, "",
                           err ? "cannot read: " + errnoText(err) : "file shrank while being read");
    }
    done += static_cast<size_t>(n);
  }
  ::close(fd);
  if (options.track)
    trackInput(path);
  return bytes;
}

void trackInput(const std::string &path) {
  std::string c = canonicalPath(path);
  std::lock_guard<std::mutex> lock(inputsMutex());
  if (gScopeDepth == 0)
    return;
  auto &list = inputsList();
  if (std::find(list.begin(), list.end(), c) == list.end())
    list.push_back(c);
}

std::vector<std::string> trackedInputs() {
  std::lock_guard<std::mutex> lock(inputsMutex());
  return inputsList();
}

InputScope::InputScope() {
  std::lock_guard<std::mutex> lock(inputsMutex());
  mark_ = inputsList().size();
  ++gScopeDepth;
}

InputScope::~InputScope() {
  std::lock_guard<std::mutex> lock(inputsMutex());
  if (inputsList().size() > mark_)
    inputsList().resize(mark_);
  --gScopeDepth;
}

void refuseInputOverlap(const std::string &path, const std::vector<std::string> &alsoAvoid,
                        bool around) {
  std::string canon = canonicalPath(path);
  std::vector<std::string> avoid = trackedInputs();
  for (const std::string &p : alsoAvoid)
    if (!p.empty())
      avoid.push_back(canonicalPath(p));
  for (const std::string &in : avoid)
    if (sameOrInside(in, canon) || (around && sameOrInside(canon, in)))
      throw InputError::at(path, "",
                           "refusing to write " +
                               std::string(in == canon               ? "over"
                                           : sameOrInside(in, canon) ? "inside"
                                                                     : "around") +
                               " the input " + in + "; choose another output path");
}

OutputTarget checkOutput(const std::string &path, const OutputOptions &options) {
  OutputTarget target;
  target.path = path;
  if (path.empty())
    throw InputError("expected an output path, found an empty one");
  bool isDir = options.kind == OutputKind::Directory;

  int streamFd = standardStreamFd(path);
  if (streamFd >= 0) {
    if (isDir || !options.allowStream)
      failExpected(path, "", isDir ? "a directory path for the package" : "a file path",
                   "a standard stream");
    target.mode = OutputMode::Stream;
    target.streamFd = streamFd;
    return target;
  }

  // Never over, inside or around something being read.
  refuseInputOverlap(path, options.alsoAvoid);
  std::string canon = canonicalPath(path);

  FileKind linkKind = fileKindOf(path, /*followLinks=*/false);
  FileKind kind = fileKindOf(path, /*followLinks=*/true);
  if (linkKind == FileKind::Symlink && kind == FileKind::Missing)
    failExpected(path, "", "an output path", "a symbolic link to a missing file");
  switch (kind) {
  case FileKind::Missing:
    target.mode = OutputMode::Create;
    break;
  case FileKind::Regular:
  case FileKind::Directory:
    if (kind == FileKind::Directory && !isDir)
      failExpected(path, "", "a file path", "a directory");
    if (!options.force)
      throw InputError::at(path, "", "output already exists; use --force to replace it");
    target.mode = OutputMode::Replace;
    break;
  case FileKind::CharDevice:
  case FileKind::Fifo:
    if (isDir || !options.allowStream)
      failExpected(path, "", isDir ? "a directory path for the package" : "a file path",
                   fileKindName(kind));
    target.mode = OutputMode::Stream;
    return target;
  default:
    failExpected(path, "", isDir ? "a directory path for the package" : "a file path",
                 fileKindName(kind));
  }
  // A link in the last component: replace what it points to, keep the link.
  if (linkKind == FileKind::Symlink)
    target.path = canon;
  fs::path parent = fs::path(target.path).parent_path();
  if (parent.empty())
    parent = ".";
  if (fileKindOf(parent.string()) != FileKind::Directory)
    throw InputError::at(path, "",
                         "cannot write: directory " + parent.string() + " does not exist");
  std::string name = fs::path(target.path).filename().string();
  if (name.empty() || name == "." || name == "..")
    failExpected(path, "", "a path ending in a name", "'" + path + "'");
  return target;
}

//===----------------------------------------------------------------------===//
// AtomicFile
//===----------------------------------------------------------------------===//

AtomicFile::AtomicFile(const std::string &path, const OutputOptions &options) : path_(path) {
  OutputOptions fileOptions = options;
  fileOptions.kind = OutputKind::File;
  OutputTarget t = checkOutput(path, fileOptions);
  if (t.mode == OutputMode::Stream) {
    stream_ = true;
    if (t.streamFd == 1 || t.streamFd == 2) {
      // Whatever the program printed before goes first.
      std::cout.flush();
      std::cerr.flush();
      std::fflush(nullptr);
    }
    if (t.streamFd >= 0) {
      fd_ = t.streamFd;
      ownsFd_ = false;
    } else {
      fd_ = ::open(path.c_str(), O_WRONLY | O_NOCTTY | O_CLOEXEC);
      if (fd_ < 0)
        throw InputError::at(path, "", "cannot open for writing: " + errnoText(errno));
    }
    return;
  }
  target_ = t.path;
  if (t.mode == OutputMode::Replace) {
    struct stat st {};
    if (::stat(target_.c_str(), &st) == 0)
      keepMode_ = static_cast<int>(st.st_mode & 07777);
  }
  fs::path p(target_);
  fs::path dir = p.parent_path();
  FatalSignalsHeld held;
  for (int attempt = 0; attempt < 8 && fd_ < 0; ++attempt) {
    tmp_ = (dir / ("." + p.filename().string() + ".tmp-" + randomSuffix())).string();
    fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd_ < 0 && errno != EEXIST)
      throw InputError::at(path, "",
                           "cannot create a temporary file in " +
                               (dir.empty() ? std::string(".") : dir.string()) + ": " +
                               errnoText(errno));
  }
  if (fd_ < 0)
    throw InputError::at(path, "", "cannot create a temporary file");
  slot_ = registerTemp(tmp_, /*isDir=*/false);
}

AtomicFile::~AtomicFile() { abort(); }

void AtomicFile::write(std::string_view bytes) {
  if (fd_ < 0)
    throw InputError::at(path_, "", "cannot write: the file is already closed");
  writeAll(fd_, bytes, path_, stream_ ? -1 : static_cast<int64_t>(offset_));
  offset_ += bytes.size();
}

void AtomicFile::writeAt(uint64_t offset, std::span<const uint8_t> bytes) {
  if (fd_ < 0)
    throw InputError::at(path_, "", "cannot write: the file is already closed");
  if (stream_) {
    // Streams only go forward: fill a gap with zeros.
    if (offset < offset_)
      throw InputError::at(path_, "", "cannot seek backwards in a stream");
    std::string zeros(static_cast<size_t>(offset - offset_), '\0');
    write(zeros);
    write(bytes);
    return;
  }
  writeAll(fd_, std::string_view(reinterpret_cast<const char *>(bytes.data()), bytes.size()), path_,
           static_cast<int64_t>(offset));
  offset_ = std::max(offset_, offset + bytes.size());
}

void AtomicFile::commit() {
  if (fd_ < 0)
    throw InputError::at(path_, "", "cannot write: the file is already closed");
  if (stream_) {
    int fd = fd_;
    fd_ = -1;
    if (ownsFd_) {
      if (::close(fd) != 0)
        throw InputError::at(path_, "", "cannot write: " + errnoText(errno));
    } else if (::fsync(fd) != 0 && errno != EINVAL && errno != EROFS && errno != ENOTSUP &&
               errno != EBADF) {
      throw InputError::at(path_, "", "cannot write: " + errnoText(errno));
    }
    return;
  }
  try {
    // A file shorter than its last hole: extend it so the hole reads zeros.
    struct stat st {};
    if (::fstat(fd_, &st) == 0 && static_cast<uint64_t>(st.st_size) < offset_ &&
        ::ftruncate(fd_, static_cast<off_t>(offset_)) != 0)
      throw InputError::at(path_, "", "cannot write: " + errnoText(errno));
    if (keepMode_ >= 0)
      ::fchmod(fd_, static_cast<mode_t>(keepMode_));
    syncFd(fd_, path_);
    int fd = fd_;
    fd_ = -1;
    if (::close(fd) != 0)
      throw InputError::at(path_, "", "cannot write: " + errnoText(errno));
    if (::rename(tmp_.c_str(), target_.c_str()) != 0)
      throw InputError::at(path_, "", "cannot move the file into place: " + errnoText(errno));
  } catch (...) {
    abort();
    throw;
  }
  unregisterTemp(slot_);
  slot_ = -1;
  tmp_.clear();
  syncDirectoryOf(target_);
}

std::string AtomicFile::commitAsNew(const std::function<std::string(int)> &nameFor) {
  if (fd_ < 0 || stream_)
    throw InputError::at(path_, "", "cannot write: the file is already closed");
  try {
    struct stat st {};
    if (::fstat(fd_, &st) == 0 && static_cast<uint64_t>(st.st_size) < offset_ &&
        ::ftruncate(fd_, static_cast<off_t>(offset_)) != 0)
      throw InputError::at(path_, "", "cannot write: " + errnoText(errno));
    syncFd(fd_, path_);
    int fd = fd_;
    fd_ = -1;
    if (::close(fd) != 0)
      throw InputError::at(path_, "", "cannot write: " + errnoText(errno));
    fs::path dir = fs::path(target_).parent_path();
    for (int attempt = 0; attempt < 64; ++attempt) {
      std::string candidate = (dir / nameFor(attempt)).string();
      FatalSignalsHeld held;
      // link(2) never replaces an existing name; the temporary goes after.
      if (::link(tmp_.c_str(), candidate.c_str()) == 0) {
        ::unlink(tmp_.c_str());
        unregisterTemp(slot_);
        slot_ = registerTemp(candidate, /*isDir=*/false);
        tmp_.clear();
        provisional_ = candidate;
        syncDirectoryOf(candidate);
        return candidate;
      }
      if (errno != EEXIST)
        throw InputError::at(path_, "", "cannot move the file into place: " + errnoText(errno));
    }
    throw InputError::at(path_, "", "cannot find a free name for the file");
  } catch (...) {
    abort();
    throw;
  }
}

void AtomicFile::keep() {
  provisional_.clear();
  unregisterTemp(slot_);
  slot_ = -1;
}

void AtomicFile::abort() {
  if (fd_ >= 0 && ownsFd_)
    ::close(fd_);
  fd_ = -1;
  if (!tmp_.empty()) {
    ::unlink(tmp_.c_str());
    tmp_.clear();
  }
  if (!provisional_.empty()) {
    ::unlink(provisional_.c_str());
    provisional_.clear();
  }
  unregisterTemp(slot_);
  slot_ = -1;
}

void writeFileAtomically(const std::string &path, std::string_view bytes,
                         const OutputOptions &options) {
  AtomicFile file(path, options);
  file.write(bytes);
  file.commit();
}

//===----------------------------------------------------------------------===//
// AtomicDirectory
//===----------------------------------------------------------------------===//

AtomicDirectory::AtomicDirectory(const std::string &path, const OutputOptions &options)
    : path_(path) {
  OutputOptions dirOptions = options;
  dirOptions.kind = OutputKind::Directory;
  dirOptions.allowStream = false;
  std::string trimmed = path;
  while (trimmed.size() > 1 && trimmed.back() == '/')
    trimmed.pop_back();
  OutputTarget t = checkOutput(trimmed, dirOptions);
  target_ = t.path;
  fs::path p(target_);
  fs::path dir = p.parent_path();
  FatalSignalsHeld held;
  for (int attempt = 0; attempt < 8; ++attempt) {
    tmp_ = (dir / ("." + p.filename().string() + ".tmp-" + randomSuffix())).string();
    if (::mkdir(tmp_.c_str(), 0777) == 0)
      break;
    if (errno != EEXIST)
      throw InputError::at(path, "",
                           "cannot create a temporary directory in " +
                               (dir.empty() ? std::string(".") : dir.string()) + ": " +
                               errnoText(errno));
    tmp_.clear();
  }
  if (tmp_.empty())
    throw InputError::at(path, "", "cannot create a temporary directory");
  slots_.push_back(registerTemp(tmp_, /*isDir=*/true, /*tree=*/true));
}

AtomicDirectory::~AtomicDirectory() {
  for (int fd : openFds_)
    ::close(fd);
  if (!committed_ && !tmp_.empty()) {
    std::error_code ec;
    fs::remove_all(tmp_, ec);
  }
  for (int s : slots_)
    unregisterTemp(s);
}

std::string AtomicDirectory::tempPath(const std::string &rel) const {
  return rel.empty() ? tmp_ : (fs::path(tmp_) / rel).string();
}

void AtomicDirectory::addDirectory(const std::string &rel) {
  fs::path walked(tmp_);
  for (const fs::path &part : fs::path(rel)) {
    if (part.empty() || part == "." || part == ".." || part.is_absolute())
      throw InputError::at(path_, "", "bad directory name '" + rel + "'");
    walked /= part;
    FatalSignalsHeld held;
    if (::mkdir(walked.c_str(), 0777) == 0)
      slots_.push_back(registerTemp(walked.string(), /*isDir=*/true));
    else if (errno != EEXIST)
      throw InputError::at(path_, "",
                           "cannot create directory " + walked.string() + ": " + errnoText(errno));
  }
}

int AtomicDirectory::createFile(const std::string &rel) {
  fs::path r(rel);
  if (r.has_parent_path())
    addDirectory(r.parent_path().string());
  std::string full = tempPath(rel);
  FatalSignalsHeld held;
  int fd = ::open(full.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
  if (fd < 0)
    throw InputError::at(path_, "", "cannot create " + rel + ": " + errnoText(errno));
  slots_.push_back(registerTemp(full, /*isDir=*/false));
  openFds_.push_back(fd);
  return fd;
}

void AtomicDirectory::closeFile(int fd) {
  auto it = std::find(openFds_.begin(), openFds_.end(), fd);
  if (it == openFds_.end())
    return;
  openFds_.erase(it);
  std::string name = path_;
  try {
    syncFd(fd, name);
  } catch (...) {
    ::close(fd);
    throw;
  }
  if (::close(fd) != 0)
    throw InputError::at(name, "", "cannot write: " + errnoText(errno));
}

void AtomicDirectory::addFile(const std::string &rel, std::string_view bytes) {
  int fd = createFile(rel);
  writeAll(fd, bytes, path_ + ": " + rel);
  closeFile(fd);
}

void AtomicDirectory::removeFile(const std::string &rel) { ::unlink(tempPath(rel).c_str()); }

void AtomicDirectory::commit() {
  while (!openFds_.empty())
    closeFile(openFds_.back());
  // Directory entries must be durable before the tree becomes visible.
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(tmp_, ec);
       !ec && it != fs::recursive_directory_iterator(); it.increment(ec))
    if (it->is_directory(ec)) {
      int fd = ::open(it->path().c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
      if (fd >= 0) {
        ::fsync(fd);
        ::close(fd);
      }
    }
  int rootFd = ::open(tmp_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (rootFd >= 0) {
    ::fsync(rootFd);
    ::close(rootFd);
  }

  // Swap the new tree into place. An existing output is exchanged with the
  // temporary in one step, so at every moment the old or the new tree is
  // complete under the name, and concurrent writers never collide on a
  // non-empty target (the last one wins).
  bool placed = false;
  std::string lastError;
  for (int attempt = 0; attempt < 16 && !placed; ++attempt) {
    if (fileKindOf(target_, /*followLinks=*/false) == FileKind::Missing) {
      if (::rename(tmp_.c_str(), target_.c_str()) == 0) {
        placed = true;
        tmp_.clear();
        break;
      }
      if (errno != ENOTEMPTY && errno != EEXIST && errno != EISDIR && errno != ENOTDIR) {
        lastError = errnoText(errno);
        break;
      }
      continue; // someone created it meanwhile: exchange instead
    }
    if (renameExchange(tmp_, target_)) {
      placed = true; // tmp_ now holds the old tree
      break;
    }
    if (errno == ENOENT)
      continue; // it went away meanwhile: plain rename
    if (errno != EINVAL && errno != ENOSYS) {
      lastError = errnoText(errno);
      break;
    }
    // No exchange on this file system: move the old tree aside first.
    fs::path aside = fs::path(target_).parent_path() /
                     ("." + fs::path(target_).filename().string() + ".old-" + randomSuffix());
    if (::rename(target_.c_str(), aside.c_str()) != 0) {
      if (errno == ENOENT)
        continue;
      lastError = errnoText(errno);
      break;
    }
    if (::rename(tmp_.c_str(), target_.c_str()) != 0) {
      lastError = errnoText(errno);
      ::rename(aside.c_str(), target_.c_str());
      break;
    }
    tmp_ = aside.string();
    placed = true;
  }
  if (!placed)
    throw InputError::at(
        path_, "",
        "cannot move the package into place: " +
            (lastError.empty() ? std::string("too many concurrent writers") : lastError));
  committed_ = true;
  // After an exchange the old tree lies under the temporary's name. The
  // root's slot (the first, a whole tree) stays registered until it is
  // gone, so a fatal signal meanwhile removes the rest of it instead of
  // leaving it beside the output.
  for (size_t i = 1; i < slots_.size(); ++i)
    unregisterTemp(slots_[i]);
  if (!tmp_.empty()) {
    fs::remove_all(tmp_, ec); // the old tree
    tmp_.clear();
  }
  if (!slots_.empty())
    unregisterTemp(slots_.front());
  slots_.clear();
  syncDirectoryOf(target_);
}

//===----------------------------------------------------------------------===//
// ScratchFile
//===----------------------------------------------------------------------===//

ScratchFile::ScratchFile(const std::string &besides) : name_(besides + " (scratch space)") {
  fs::path dir = fs::path(besides).parent_path();
  std::string where = dir.empty() ? std::string(".") : dir.string();
#ifdef O_TMPFILE
  // Never visible under any name.
  fd_ = ::open(where.c_str(), O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
#endif
  if (fd_ < 0) {
    // No O_TMPFILE here (or not on this file system): a named file unlinked
    // before a fatal signal can see it.
    FatalSignalsHeld held;
    for (int attempt = 0; attempt < 8 && fd_ < 0; ++attempt) {
      fs::path tmp = fs::path(where) /
                     ("." + fs::path(besides).filename().string() + ".scratch-" + randomSuffix());
      fd_ = ::open(tmp.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
      if (fd_ >= 0) {
        ::unlink(tmp.c_str());
        break;
      }
      if (errno != EEXIST)
        throw InputError::at(besides, "",
                             "cannot create a scratch file in " + where + ": " + errnoText(errno));
    }
  }
  if (fd_ < 0)
    throw InputError::at(besides, "", "cannot create a scratch file in " + where);
}

ScratchFile::~ScratchFile() {
  if (mapping_)
    ::munmap(mapping_, static_cast<size_t>(size_));
  if (fd_ >= 0)
    ::close(fd_);
}

void ScratchFile::writeAt(uint64_t offset, std::span<const uint8_t> bytes) {
  if (mapped_)
    throw InputError::at(name_, "", "cannot write: the scratch file is already read");
  if (offset > static_cast<uint64_t>(std::numeric_limits<off_t>::max()) - bytes.size())
    throw InputError::at(name_, "", "cannot write at offset " + std::to_string(offset));
  writeAll(fd_, std::string_view(reinterpret_cast<const char *>(bytes.data()), bytes.size()), name_,
           static_cast<int64_t>(offset));
  size_ = std::max(size_, offset + bytes.size());
}

std::span<const uint8_t> ScratchFile::bytes() {
  if (!mapped_) {
    if (size_ > std::numeric_limits<size_t>::max())
      throw InputError::at(name_, "", "too large to map");
    // A trailing hole: extend the file so it reads back as zeros.
    struct stat st {};
    if (::fstat(fd_, &st) != 0 || (static_cast<uint64_t>(st.st_size) < size_ &&
                                   ::ftruncate(fd_, static_cast<off_t>(size_)) != 0))
      throw InputError::at(name_, "", "cannot write: " + errnoText(errno));
    if (size_ > 0) {
      void *p = ::mmap(nullptr, static_cast<size_t>(size_), PROT_READ, MAP_SHARED, fd_, 0);
      if (p == MAP_FAILED)
        throw InputError::at(name_, "", "cannot map: " + errnoText(errno));
      mapping_ = p;
    }
    mapped_ = true;
  }
  return {static_cast<const uint8_t *>(mapping_), static_cast<size_t>(size_)};
}

std::string randomHex(size_t digits) {
  std::string out;
  while (out.size() < digits)
    out += randomSuffix();
  return out.substr(0, digits);
}

std::string safeFileName(std::string_view name) {
  std::string out;
  for (char ch : name.substr(0, 200)) {
    auto c = static_cast<unsigned char>(ch);
    out += (c < 0x20 || c == 0x7f || ch == '/' || ch == '\\') ? '_' : ch;
  }
  if (!out.empty() && out[0] == '.')
    out[0] = '_';
  if (out.empty())
    out = "_";
  return out;
}

} // namespace anefit
