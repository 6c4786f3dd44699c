// Which paths mhcdiff may read and write, and the temp-file-and-rename that makes every output atomic.
#include "io/files.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string_view>

#include "io/hdf5_util.hpp"
#include "report/text_safety.hpp"

namespace mhc::io {

namespace fs = std::filesystem;

// ---- temp files removed on the signals that end a process --------------------------------------------------
// A killed run must not leave its temp file behind. SIGKILL cannot be caught (its temp file, named
// .<output>.mhcdiff-tmp-XXXXXX or, for a name near the directory's limit, .mhcdiff-tmp-XXXXXX, stays; the
// destination is intact either way); the catchable signals whose default ends the process (Ctrl-C, kill, a closed
// terminal, Ctrl-\\, a closed pipe on stderr, timers, CPU limits; stdout's closed pipe is ignored) unlink
// every registered temp file and then die with the default action. SIGXFSZ is ignored instead: past the file size
// limit (ulimit -f) a write then fails with EFBIG, which the writers report as one sentence, exit 2, with the temp
// file removed; by default the signal killed the process silently (exit 153) and left the temp file. Fixed-size
// storage because a signal handler may only call async-signal-safe functions (unlink, signal, raise), never
// allocate.
namespace {

constexpr int kMaxTempFiles = 8;
struct TempSlot {
  std::atomic<bool> used{false};
  char path[4096] = {};
};
std::array<TempSlot, kMaxTempFiles> g_temp_slots;

void remove_temps() {
  for (TempSlot& slot : g_temp_slots)
    if (slot.used.load()) unlink(slot.path);
}

extern "C" void remove_temps_and_die(int sig) {
  remove_temps();
  std::signal(sig, SIG_DFL);
  std::raise(sig);
}

// Async-signal-safe: unlink, write and _exit only. The message is fixed text (no allocation, no formatting).
extern "C" void report_crash(int sig) {
  remove_temps();
  const char* message =
      "[error] mhcdiff crashed (SIGSEGV): HDF5 1.10 does this reading a damaged file (h5dump crashes on it too); check "
      "the input files with h5dump (if they are intact, this is a bug in mhcdiff). Nothing was written.\n";
  if (sig == SIGBUS)
    message = "[error] mhcdiff crashed (SIGBUS) reading or writing a file: a damaged HDF5 file, or one truncated while "
              "mapped, does this; check the files with h5dump (if they are intact, this is a bug in mhcdiff). Nothing "
              "was written.\n";
  if (sig == SIGABRT)  // glibc's own line ("free(): invalid pointer") comes first
    message = "[error] mhcdiff aborted (SIGABRT), most likely freeing a corrupted pointer: HDF5 1.10 hands out such "
              "pointers reading a damaged file; check the input files with h5dump (if they are intact, this is a bug "
              "in mhcdiff). Nothing was written.\n";
  ssize_t ignored = write(STDERR_FILENO, message, std::strlen(message));
  (void)ignored;
  _exit(2);
}

void install_signal_cleanup() {
  static std::atomic<bool> installed{false};
  if (installed.exchange(true)) return;
  // Never replace a handler someone else installed (or an inherited SIG_IGN).
  auto defaulted = [](int sig) {
    struct sigaction current {};
    sigaction(sig, nullptr, &current);
    return current.sa_handler == SIG_DFL;
  };
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGPIPE, SIGALRM, SIGUSR1, SIGUSR2, SIGXCPU, SIGVTALRM, SIGPROF})
    if (defaulted(sig)) std::signal(sig, remove_temps_and_die);
  if (defaulted(SIGXFSZ)) std::signal(SIGXFSZ, SIG_IGN);
}

int register_temp(const std::string& path) {
  install_signal_cleanup();
  if (path.size() >= sizeof(TempSlot::path)) return -1;
  for (int i = 0; i < kMaxTempFiles; ++i) {
    TempSlot& slot = g_temp_slots[size_t(i)];
    if (slot.used.load()) continue;
    std::memcpy(slot.path, path.c_str(), path.size() + 1);
    slot.used.store(true);
    return i;
  }
  return -1;
}

void unregister_temp(int slot) {
  if (slot >= 0) g_temp_slots[size_t(slot)].used.store(false);
}

std::string kind_of(fs::file_type t) {
  switch (t) {
    case fs::file_type::directory: return "a directory";
    case fs::file_type::fifo: return "a FIFO (named pipe)";
    case fs::file_type::character: return "a character device";
    case fs::file_type::block: return "a block device";
    case fs::file_type::socket: return "a socket";
    default: return "not a regular file";
  }
}

// A name in a process's descriptor directory: /dev/fd, /proc/<pid>/fd or /proc/<pid>/task/<tid>/fd, however spelt
// (/dev/./fd, ../../dev/fd, a link to /dev/fd): its directory is compared once made canonical, which /dev/fd and
// /proc/self resolve through.
bool names_descriptor(const fs::path& p) {
  std::error_code ec;
  const fs::path dir = fs::weakly_canonical(p.parent_path(), ec);
  if (ec || dir.filename() != "fd") return false;
  const auto first = ++dir.begin();
  return first != dir.end() && *first == "proc";
}

// `p` with every symlink of its last component followed (a dangling link gives the path it points to), then
// made canonical as far as it exists. Sets `followed` when a link was followed, and `descriptor` (returning at once)
// when one on the way is a file descriptor's: written through, the rename would replace a redirected stdout's file
// (the rest of the output lost), and a pipe failed with a temp-file error naming /proc.
fs::path resolve_output(const fs::path& p0, bool& followed, bool& descriptor) {
  std::error_code ec;
  fs::path p = fs::absolute(p0, ec);
  if (ec) p = p0;
  followed = false;
  descriptor = false;
  for (int hops = 0; fs::is_symlink(p, ec); ++hops) {
    if (hops == 40) throw std::system_error(std::make_error_code(std::errc::too_many_symbolic_link_levels));
    if (names_descriptor(p)) {
      descriptor = true;
      return p;
    }
    const fs::path link = fs::read_symlink(p);
    p = link.is_absolute() ? link : p.parent_path() / link;
    followed = true;
  }
  fs::path canonical = fs::weakly_canonical(p, ec);
  return ec ? p.lexically_normal() : canonical;
}

}  // namespace

// ---- StallGuard: one process-wide one-shot timer, armed by the outermost guard ------------------------------
namespace {

std::array<char, 1024> g_stall_message{};
size_t g_stall_length = 0;
volatile sig_atomic_t g_stall_armed = 0;

// Async-signal-safe: unlink, write and _exit only. A signal that arrives after the guard ended is ignored.
extern "C" void report_stall(int) {
  if (!g_stall_armed) return;
  remove_temps();
  ssize_t ignored = write(STDERR_FILENO, g_stall_message.data(), g_stall_length);
  (void)ignored;
  _exit(2);
}

// The timer, created on first use (nullptr when the system refuses one: the guard then does nothing).
timer_t* stall_timer() {
  static timer_t timer;
  static const bool created = [] {
    struct sigaction action {};
    action.sa_handler = report_stall;
    sigemptyset(&action.sa_mask);
    if (sigaction(SIGRTMIN, &action, nullptr) != 0) return false;
    sigevent event{};
    event.sigev_notify = SIGEV_SIGNAL;
    event.sigev_signo = SIGRTMIN;
    return timer_create(CLOCK_MONOTONIC, &event, &timer) == 0;
  }();
  return created ? &timer : nullptr;
}

}  // namespace

StallGuard::StallGuard(const std::string& message, double seconds) {
  timer_t* timer = stall_timer();
  if (g_stall_armed || timer == nullptr || !(seconds > 0 && seconds < 1e9)) return;  // 1e9 s: no limit
  const std::string line = "[error] " + report::one_line(message) + "\n";  // one line, as the log's (OneLineSink)
  g_stall_length = std::min(line.size(), g_stall_message.size());
  std::memcpy(g_stall_message.data(), line.data(), g_stall_length);
  g_stall_message[g_stall_length - 1] = '\n';
  itimerspec when{};
  when.it_value.tv_sec = static_cast<time_t>(seconds);
  when.it_value.tv_nsec = static_cast<long>((seconds - double(when.it_value.tv_sec)) * 1e9);
  g_stall_armed = 1;
  armed_ = timer_settime(*timer, 0, &when, nullptr) == 0;
  if (!armed_) g_stall_armed = 0;
}

StallGuard::~StallGuard() {
  if (!armed_) return;
  g_stall_armed = 0;  // first: a signal already on its way is then ignored
  const itimerspec off{};
  timer_settime(*stall_timer(), 0, &off, nullptr);
}

namespace {
std::atomic<bool> g_main_returned{false};

// Async-signal-safe like report_crash: it may run from a library's exit() on any thread.
extern "C" void report_early_exit() {
  if (g_main_returned.load()) return;
  remove_temps();
  const char* message =
      "[error] a library ended mhcdiff before it finished (its reason is on the line above; libgomp ends it so when it "
      "cannot start the threads asked for: fewer threads, --threads or OMP_NUM_THREADS, or a higher process or "
      "memory limit). Nothing was written.\n";
  ssize_t ignored = write(STDERR_FILENO, message, std::strlen(message));
  (void)ignored;
  _exit(2);
}
}  // namespace

void report_early_exits() { std::atexit(report_early_exit); }
void main_returning() { g_main_returned.store(true); }

void report_crashes_as_input_errors() {
  // The handler runs on a stack of its own, so that a crash by stack overflow (the main thread's) gets the message
  // too instead of dying silently where the handler would have run.
  static std::array<char, 64 * 1024> handler_stack;
  stack_t alternate{};
  alternate.ss_sp = handler_stack.data();
  alternate.ss_size = handler_stack.size();
  const bool on_own_stack = sigaltstack(&alternate, nullptr) == 0;
  for (int sig : {SIGSEGV, SIGBUS, SIGABRT}) {
    struct sigaction action {};
    action.sa_handler = report_crash;
    sigemptyset(&action.sa_mask);
    // SA_RESETHAND: a crash inside the handler ends the process the default way.
    action.sa_flags = SA_RESETHAND | (on_own_stack ? SA_ONSTACK : 0);
    sigaction(sig, &action, nullptr);
  }
}

std::string system_reason(int err) {
  std::string s = std::strerror(err);
  if (!s.empty()) s[0] = char(std::tolower(static_cast<unsigned char>(s[0])));
  return s;
}

namespace {
int stdout_write_errno = 0;  // the reason of the first write to standard output that failed (0: none)
}  // namespace

void write_stdout(const std::string& text) {
  // A closed pipe is then a failed write (EPIPE), reported by flush_stdout as exit 2 with one message, not a death
  // by signal (exit 141, no message). Whatever temp files are being written are removed as the error unwinds.
  static const bool pipe_ignored = [] { return std::signal(SIGPIPE, SIG_IGN) != SIG_ERR; }();
  (void)pipe_ignored;
  errno = 0;
  if (std::fputs(text.c_str(), stdout) < 0 && stdout_write_errno == 0) stdout_write_errno = errno;
}

void flush_stdout() {
  errno = 0;
  if (std::fflush(stdout) == 0 && !std::ferror(stdout)) return;
  // A write that failed before (stdio flushes a full buffer within fputs) left the error flag set and its errno
  // long overwritten; then fflush has nothing left to write and no reason to give.
  const int err = errno ? errno : stdout_write_errno;
  stdout_write_errno = 0;
  throw IoError(fmt::format("could not write to standard output{}", err ? ": " + system_reason(err) : std::string()));
}

void require_regular_file(const std::string& path, const std::string& role, const std::string& expected) {
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  if (st.type() == fs::file_type::not_found || path.empty())
    throw InputError(fmt::format("{} {} does not exist", role, path));
  if (ec) throw InputError(fmt::format("cannot read {} {}: {}", role, path, ec.message()));
  if (st.type() == fs::file_type::regular) return;
  if (st.type() == fs::file_type::directory)
    throw InputError(fmt::format("{} {} is a directory, not {}", role, path, expected));
  throw InputError(fmt::format("{} {} is {}, not {}: mhcdiff reads regular files only", role, path,
                               kind_of(st.type()), expected));
}

bool same_file(const std::string& a, const std::string& b) {
  std::error_code ec;
  if (fs::exists(a, ec) && fs::exists(b, ec) && fs::equivalent(a, b, ec)) return true;
  std::error_code ea, eb;
  const fs::path ca = fs::weakly_canonical(fs::absolute(a, ea), ea), cb = fs::weakly_canonical(fs::absolute(b, eb), eb);
  return !ea && !eb && ca == cb;
}

namespace {

struct CheckedOutput {
  fs::path target, dir;  // dir: as the user wrote it (as the link points, when one was followed)
  bool existed = false;
  long name_max = -1;  // the directory's limit on a name (NAME_MAX), -1 when it cannot say
};

CheckedOutput check_output(const std::string& path, const std::string& what, const std::vector<SourceFile>& sources,
                           GoldenTarget golden) {
  auto refuse = [&](const std::string& why) {
    throw InputError(fmt::format("cannot write the {} {}: {}", what, path, why));
  };
  if (path.empty()) throw InputError(fmt::format("the {} path is empty", what));
  // CLI11 reads `-o=x.h5` as the name "=x.h5" (the = form is for long options); nobody means that name.
  if (path.front() == '=')
    refuse(fmt::format("it starts with '=' (a short option takes its value after a space: -o {})", path.substr(1)));
  CheckedOutput out;
  bool followed = false, descriptor = false;
  try {
    out.target = resolve_output(path, followed, descriptor);
  } catch (const std::system_error& e) {
    refuse(e.code().message());
  }
  if (descriptor)
    refuse(fmt::format("it is an open file descriptor (a standard stream such as /dev/stdout), and mhcdiff writes "
                       "files only, renaming a complete temp file into place{}",
                       what == "report" ? " (the report goes to standard output when --report is left out)" : ""));
  const std::string via = followed ? fmt::format(" (the symlink points to {})", out.target.string()) : "";
  std::error_code ec;
  const fs::file_status st = fs::status(out.target, ec);
  if (st.type() == fs::file_type::directory) refuse("it is a directory; expected a file name" + via);
  out.existed = fs::exists(st);
  if (out.existed && st.type() != fs::file_type::regular)
    refuse(fmt::format("it exists and is not a regular file ({}{}), and mhcdiff replaces regular files only",
                       kind_of(st.type()), followed ? ": " + out.target.string() : ""));
  for (const SourceFile& src : sources)
    if (!src.path.empty() && same_file(out.target.string(), src.path))
      refuse(fmt::format("it is the {} file, which it would replace; choose another {} path", src.role, what));
  if (out.existed && golden == GoldenTarget::refuse) {
    std::string why;
    const std::optional<bool> is_golden =
        detail::file_has_root_attribute(out.target.string(), kGoldenFormatAttribute, why);
    if (!is_golden)  // a golden baseline a writer holds, or one damaged in transit, stays: fail closed
      refuse(fmt::format("{}, so whether it is a golden baseline (which only `mhcdiff golden regen --force` replaces) "
                         "cannot be told; remove it or choose another {} path",
                         why, what));
    if (*is_golden)
      refuse(fmt::format("it is a golden baseline ({} attribute), which only `mhcdiff golden regen --force` "
                         "replaces; choose another {} path",
                         kGoldenFormatAttribute, what));
  }

  out.dir = followed ? out.target.parent_path() : fs::path(path).parent_path();
  if (out.dir.empty()) out.dir = ".";
  if (!fs::is_directory(out.dir, ec)) {
    // The nearest ancestor that exists tells a regular file where a directory should be from a missing one.
    fs::path ancestor = out.dir;
    while (!ancestor.empty() && ancestor != ancestor.root_path() && !fs::exists(ancestor, ec))
      ancestor = ancestor.parent_path();
    if (!ancestor.empty() && fs::exists(ancestor, ec) && !fs::is_directory(ancestor, ec))
      refuse(fmt::format("{} is not a directory", ancestor.string()));
    refuse(fmt::format("directory {} does not exist", out.dir.string()));
  }
  if (access(out.dir.c_str(), W_OK | X_OK) != 0) refuse(fmt::format("directory {} is not writable", out.dir.string()));
  // A name the directory cannot hold would otherwise fail only at the rename, after all the work.
  out.name_max = pathconf(out.dir.c_str(), _PC_NAME_MAX);
  if (const size_t length = out.target.filename().string().size(); out.name_max > 0 && length > size_t(out.name_max))
    refuse(fmt::format("{} (its name is {} bytes; the directory takes at most {})", system_reason(ENAMETOOLONG), length,
                       out.name_max));
  if (out.existed && access(out.target.c_str(), W_OK) != 0) refuse("the existing file is not writable" + via);
  return out;
}

}  // namespace

std::filesystem::path check_output_path(const std::string& path, const std::string& what,
                                        const std::vector<SourceFile>& sources, GoldenTarget golden) {
  return check_output(path, what, sources, golden).target;
}

std::filesystem::path check_output_fits(const std::string& path, const std::string& what, double bytes,
                                        const std::vector<SourceFile>& sources, GoldenTarget golden) {
  const fs::path target = check_output(path, what, sources, golden).target;
  std::error_code ec;
  const fs::space_info space = fs::space(target.parent_path(), ec);
  // A filesystem that reports no capacity (some FUSE, NFS or quota mounts) says nothing about free space either.
  if (!ec && space.capacity > 0 && bytes > double(space.available))
    throw InputError(fmt::format("cannot write the {} {}: it would take about {:.3g} GB, but its filesystem ({}) has "
                                 "{:.3g} GB free",
                                 what, path, bytes / 1e9, target.parent_path().string(),
                                 double(space.available) / 1e9));
  return target;
}

AtomicOutput::AtomicOutput(const std::string& path, const std::string& what, const std::vector<SourceFile>& sources,
                           GoldenTarget golden)
    : requested_(path), what_(what) {
  const CheckedOutput checked = check_output(path, what, sources, golden);
  target_ = checked.target;
  existed_ = checked.existed;
  // The temp file is named ".<name>" + kTempSuffix; where that would pass the directory's limit on a name
  // (NAME_MAX, 255 on most filesystems) a name the filesystem accepts must still be writable, so the destination's
  // name is left out of it.
  constexpr std::string_view kTempSuffix = ".mhcdiff-tmp-XXXXXX";
  const std::string name = target_.filename().string();
  const bool too_long = checked.name_max > 0 && 1 + name.size() + kTempSuffix.size() > size_t(checked.name_max);
  std::string templ = (target_.parent_path() / ((too_long ? "" : "." + name) + std::string(kTempSuffix))).string();
  const int fd = mkstemp(templ.data());
  if (fd < 0)
    throw IoError(fmt::format("cannot write the {} {}: could not create a temp file in {} ({})", what, path,
                              checked.dir.string(), system_reason(errno)));
  // mkstemp makes the file 0600; give it the mode a plain create would (0666 minus the umask).
  const mode_t mask = umask(0);
  umask(mask);
  fchmod(fd, 0666 & ~mask);
  close(fd);
  temp_path_ = templ;
  temp_slot_ = register_temp(temp_path_);
}

AtomicOutput::~AtomicOutput() {
  if (!committed_ && !temp_path_.empty()) unlink(temp_path_.c_str());
  unregister_temp(temp_slot_);
}

std::string AtomicOutput::failure(const std::string& reason) const {
  return fmt::format("writing the {} {} failed: {}; {}", what_, requested_, reason,
                     existed_ ? fmt::format("the existing {} is untouched", requested_) : "nothing was written");
}

void AtomicOutput::commit() {
  if (committed_) throw std::logic_error("AtomicOutput::commit called twice");
  // Data on disk before the rename, so a crash right after it cannot expose an empty file.
  const int fd = open(temp_path_.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw IoError(failure(system_reason(errno)));
  if (fsync(fd) != 0) {
    const int err = errno;
    close(fd);
    throw IoError(failure(system_reason(err)));
  }
  close(fd);
  if (std::rename(temp_path_.c_str(), target_.c_str()) != 0) {
    const std::string reason = system_reason(errno);
    // Removed here rather than by the destructor, so the sentence can say when it cannot be: a directory that takes
    // new files but forbids renaming and unlinking them (chattr +a) keeps the temp file whatever mhcdiff does.
    if (unlink(temp_path_.c_str()) != 0 && errno != ENOENT) {
      const std::string unlink_reason = system_reason(errno);
      throw IoError(fmt::format("writing the {} {} failed: {}; {}, but its temp file {} could not be removed either "
                                "({}): delete it by hand",
                                what_, requested_, reason,
                                existed_ ? fmt::format("the existing {} is untouched", requested_)
                                         : "the output was not written",
                                temp_path_, unlink_reason));
    }
    temp_path_.clear();
    throw IoError(failure(reason));
  }
  committed_ = true;
  unregister_temp(temp_slot_);
  temp_slot_ = -1;
  if (int dir = open(target_.parent_path().c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC); dir >= 0) {
    fsync(dir);
    close(dir);
  }
}

}  // namespace mhc::io
