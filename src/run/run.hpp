#pragma once
// The `mhcdiff run` pipeline as a library function: read a slab of tokens → every policy forward (and
// backward) on the chosen device → append to the results file; the inputs are copied into /inputs so the
// results file is self-contained. Memory is bounded by the slab size, not by S (docs/format.md).
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "io/store.hpp"
#include "kernels/dispatch.hpp"

namespace mhc::run {

struct RunOptions {
  std::string input;
  std::string output;
  std::string policies = "all";  // "all" or a comma-separated list (names or aliases)
  std::vector<std::string> policy_files;  // --policy-file: user policies run after the listed ones
  std::string device = "auto";   // auto | cpu | cuda
  bool backward = false;         // needs /inputs/grad_out
  int threads = 0;               // CPU threads, 0 = all, at most kMaxThreads (run/thread_count.hpp)
  int64_t slab_tokens = 0;       // 0: about 64 MiB of inputs per slab
  int deflate_level = 0;         // 0: no compression (see docs/format.md for why that is the default)
  io::ReadOptions read;
  // Called after each slab with (tokens done, total tokens); the CLI draws its progress bar with it.
  std::function<void(int64_t, int64_t)> progress;
};

struct PolicyRunStats {
  std::string policy;
  RunStats stats;
  double seconds = 0;  // time in forward/backward for this policy (device work, no I/O)
};

struct RunSummary {
  Shape shape;
  std::vector<int64_t> batch_dims;
  std::string device;
  int64_t slab_tokens = 0;
  int64_t slabs = 0;
  io::InputCensus census;
  std::string input_checksum;
  std::vector<PolicyRunStats> policies;
  double seconds_total = 0;
};

// Throws InputError for bad input (nothing is written then: the output is committed only at the end).
RunSummary run_policies(const RunOptions& options);

}  // namespace mhc::run
