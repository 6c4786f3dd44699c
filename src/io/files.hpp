#pragma once
// The filesystem side of the store (docs/format.md, "Validation" and "Atomic writes"): which paths may be read
// and written, and how an output replaces its destination atomically. Shared by ResultWriter (HDF5 outputs) and
// report::write_file_atomically (compare's --report), so both refuse the same paths with the same sentences.
#include <filesystem>
#include <string>
#include <vector>

#include "io/errors.hpp"

namespace mhc::io {

// InputError unless `path` names a regular file (symlinks followed): a directory or a device is never an HDF5 or
// policy file, and opening a FIFO would block forever. `role` starts the sentence ("input file"), `expected` ends
// it ("an HDF5 file").
void require_regular_file(const std::string& path, const std::string& role, const std::string& expected);

// A file the command reads, which its output must not replace, e.g. {"input", "in.h5"}, {"candidate", "res.h5"}.
struct SourceFile {
  std::string role;
  std::string path;
};

// True when `a` and `b` name the same file: std::filesystem::equivalent (hard links, symlinks) or, for a path that
// does not exist yet, the same canonical path.
bool same_file(const std::string& a, const std::string& b);

// Whether an output may replace a golden baseline (an HDF5 file with the root attribute golden_format, which
// compare/golden.cpp writes): only `golden regen --force` may; every other output refuses one, so that `run -o`,
// `gen -o`, `extract -o` or `compare --report` aimed at the baseline cannot replace what CI checks against.
enum class GoldenTarget { refuse, replace };
inline constexpr const char* kGoldenFormatAttribute = "golden_format";

// The checks AtomicOutput's constructor makes, alone: a command calls it before its work, so a refused output path
// fails fast (the writer checks again when it is created).
// Returns the file the output would replace (symlinks followed).
std::filesystem::path check_output_path(const std::string& path, const std::string& what,
                                        const std::vector<SourceFile>& sources = {},
                                        GoldenTarget golden = GoldenTarget::refuse);

// check_output_path, and then that a file of about `bytes` fits the free space of the disk the output would be
// written on (a symlink's target's): InputError otherwise ("cannot write the output o.h5: it would take about
// 1.1e+05 GB, but its filesystem (/data) has 67 GB free"). A command that would write for hours before the disk is
// full calls it before any work (gen, run). Where the free space cannot be read, the write itself reports it.
std::filesystem::path check_output_fits(const std::string& path, const std::string& what, double bytes,
                                        const std::vector<SourceFile>& sources = {},
                                        GoldenTarget golden = GoldenTarget::refuse);

// For the command-line program: a crash (SIGSEGV, SIGBUS, or SIGABRT from the C library's heap checks) removes the
// temp files, says in one line what usually causes it and exits 2 (the exit code of an input error) instead of dying
// silently with 139 or 134. HDF5 1.10 crashes this way reading a damaged file (a few bytes overwritten inside its
// global heap; h5dump crashes on it too): which signal depends on the garbage pointer it hands out (free() of it
// aborts). That is bad input; the line also says that an intact file means a bug.
void report_crashes_as_input_errors();

// For the command-line program: an exit() before main returns, which only a library makes (libgomp's when it cannot
// start a thread: a process or memory limit, OMP_STACKSIZE too large), exited 1, which compare's callers read as a
// failed gate, and left the output's temp file behind. After this call such an exit removes the temp files, adds one
// line after the library's own and exits 2; main calls main_returning() as it returns, and a caller that does not
// would turn its normal exit into exit 2.
void report_early_exits();
void main_returning();

// Ends the process if it is still inside the guarded call `seconds` after the guard was made: `message` (one line)
// on stderr, the registered temp files removed, exit 2 (an input error). For HDF5 calls that loop forever on some
// damaged files: HDF5 1.10 reads a global heap collection whose free-space object has size 0 by stepping 0 bytes
// forever (docs/format.md, "Atomic writes"). A POSIX timer and a real-time signal, so that the handler can act while
// the loop holds the thread; it only unlinks, writes and exits. Guards do not nest: an inner one does nothing.
class StallGuard {
 public:
  StallGuard(const std::string& message, double seconds);
  ~StallGuard();
  StallGuard(const StallGuard&) = delete;
  StallGuard& operator=(const StallGuard&) = delete;

 private:
  bool armed_ = false;
};

// An output file written beside its destination and renamed over it on commit(), so a reader never sees a partial
// file and a failure leaves the old one intact. The constructor refuses (InputError, one sentence naming `what`,
// e.g. "output" or "report"): an empty path; a directory; an existing path that is not a regular file (a device
// node, a FIFO: never replaced); a path that is the same file as one of `sources`; a golden baseline unless
// `golden` is GoldenTarget::replace; a missing or unwritable
// directory; an existing file that is not writable; a name longer than the directory takes. A symlink is written
// through: its target gets the content and the link stays. The temp file `.<name>.mhcdiff-tmp-XXXXXX`
// (`.mhcdiff-tmp-XXXXXX` where the name is within 20 bytes of the directory's limit; mode 0666 & ~umask) is
// removed by the destructor unless commit() ran, and by the catchable signals that end a process (files.cpp).
class AtomicOutput {
 public:
  AtomicOutput(const std::string& path, const std::string& what, const std::vector<SourceFile>& sources = {},
               GoldenTarget golden = GoldenTarget::refuse);
  ~AtomicOutput();
  AtomicOutput(const AtomicOutput&) = delete;
  AtomicOutput& operator=(const AtomicOutput&) = delete;

  const std::string& path() const { return requested_; }         // as the user wrote it
  const std::filesystem::path& target() const { return target_; }  // the file replaced (symlinks resolved)
  const std::string& temp_path() const { return temp_path_; }

  // fsyncs the temp file, renames it over the target and fsyncs the directory; IoError when that fails.
  void commit();

  // The sentence for a failed write: "writing the output o.h5 failed: no space left on device; nothing was
  // written" (or "…; the existing o.h5 is untouched").
  std::string failure(const std::string& reason) const;

 private:
  std::string requested_, what_;
  std::filesystem::path target_;
  bool existed_ = false;
  std::string temp_path_;
  int temp_slot_ = -1;
  bool committed_ = false;
};

// Writes text to standard output (stdio's buffer), keeping the system's reason when a write fails, for flush_stdout.
// The first call ignores SIGPIPE, so that a closed pipe is such a failure rather than a silent exit 141.
void write_stdout(const std::string& text);

// Flushes standard output and throws IoError (one sentence with the system's reason) when anything written to it
// was lost: a full disk under `> report.json`, a closed pipe. Without it a small report stayed in the buffer, was
// dropped at exit, and the exit code still said 0 or 1.
void flush_stdout();

// strerror(err) with a lower-case first letter, to end a sentence ("no space left on device").
std::string system_reason(int err);

}  // namespace mhc::io
