#pragma once
// The one rule for a CPU thread count, used by the library entry points that take one (run, compare, golden regen,
// fingerprint, extract, the CPU bench)
// and by every command's --threads check (apps/mhcdiff/commands.hpp), so a library caller cannot ask for what the
// CLI refuses (docs/decisions.md, "Command lines").
#include <fmt/format.h>

#include "io/errors.hpp"

namespace mhc::run {

// 0 means all cores. At most 1024 (more than the largest two-socket servers' hardware threads): libgomp cannot
// start tens of thousands of threads and then exits 1 or crashes mid-run, leaving an output's temp file behind.
inline constexpr int kMaxThreads = 1024;

// InputError unless 0 <= threads <= kMaxThreads; a negative count is never silently "all".
inline void require_thread_count(int threads) {
  if (threads < 0 || threads > kMaxThreads)
    throw InputError(fmt::format("--threads must be 0 (all cores) or 1..{} (got {})", kMaxThreads, threads));
}

}  // namespace mhc::run
