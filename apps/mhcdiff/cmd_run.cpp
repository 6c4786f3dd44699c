// mhcdiff run: every requested policy on the inputs, results into an mhcdiff/1 file (SPEC §3, §4).
#include <fmt/core.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>

#include "commands.hpp"
#include "input_cli.hpp"
#include "io/errors.hpp"
#include "run/run.hpp"

namespace mhc::cli {
namespace {

// A one-line progress bar on stderr, redrawn at most 10 times a second. Hand-written (20 lines) because no
// progress-bar library is among the project's dependencies and it needs nothing beyond '\r'.
class ProgressBar {
 public:
  void update(int64_t done, int64_t total) {
    const auto now = std::chrono::steady_clock::now();
    if (done < total && now - last_ < std::chrono::milliseconds(100)) return;
    last_ = now;
    const double frac = total > 0 ? double(done) / double(total) : 1.0;
    const int width = 30, filled = int(frac * width);
    const double secs = std::chrono::duration<double>(now - start_).count();
    std::fprintf(stderr, "\r[%s%s] %3.0f%%  %lld/%lld tokens  %.1f s", std::string(size_t(filled), '#').c_str(),
                 std::string(size_t(width - filled), '.').c_str(), 100 * frac, static_cast<long long>(done),
                 static_cast<long long>(total), secs);
    drawn_ = true;
  }
  ~ProgressBar() {
    if (drawn_) std::fprintf(stderr, "\r\033[K");
  }

 private:
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now(), last_{};
  bool drawn_ = false;
};

}  // namespace

void add_run_command(CLI::App& app, CommandContext&) {
  struct Args {
    run::RunOptions o;
    InputReadCli read;
  };
  auto args = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand("run", "run rounding policies on an input file and store every output");
  cmd->add_option("input", args->o.input, "input file (mhcdiff/1, /inputs group)")->required();
  cmd->add_option("-o,--output", args->o.output, "results file (written atomically; must differ from the input)")
      ->required();
  cmd->add_option("--policies", args->o.policies,
                  "comma-separated policies/aliases; all = every built-in (a --policy-file policy always runs "
                  "too; name it to set its place)")
      ->capture_default_str();
  cmd->add_option("--policy-file", args->o.policy_files, "a user policy (docs/policy-file.md); repeatable");
  cmd->add_option("--device", args->o.device, "auto | cpu | cuda")->capture_default_str();
  cmd->add_flag("--backward", args->o.backward, "also compute the gradients (needs /inputs/grad_out)");
  cmd->add_option("--threads", args->o.threads, "CPU threads (0: all)")->transform(thread_count_check())->capture_default_str();
  // Bounded like extract's --worst: CLI11 saturates int64 text beyond 2^63 instead of refusing it.
  cmd->add_option("--slab-tokens", args->o.slab_tokens, "tokens per slab (0: about 64 MiB of inputs)")
      ->transform(whole_number_in(0, int64_t{1} << 40))
      ->capture_default_str();
  add_input_read_options(cmd, args->read);
  cmd->add_option("--compress", args->o.deflate_level, "shuffle+deflate level 0..9 for the results (0: none)")
      ->transform(whole_number_in(0, 9))
      ->capture_default_str();
  cmd->callback([args] {
    run::RunOptions o = args->o;
    o.read = args->read.options();
    std::unique_ptr<ProgressBar> bar;
    if (isatty(STDERR_FILENO) && spdlog::should_log(spdlog::level::info)) {
      bar = std::make_unique<ProgressBar>();
      o.progress = [&bar](int64_t done, int64_t total) { bar->update(done, total); };
    }
    const run::RunSummary s = run::run_policies(o);
    bar.reset();
    if (s.census.nan_count || s.census.inf_count)
      spdlog::warn("{}: the inputs hold {} NaN and {} Inf values (--allow-nonfinite: they propagate to the outputs)", o.input,
                   s.census.nan_count, s.census.inf_count);
    if (s.census.rounded_count)
      spdlog::warn("{}: --round-inputs rounded {} input values to the nearest bf16/fp32", o.input,
                   s.census.rounded_count);
    const int64_t outputs = s.shape.S * s.shape.H * s.shape.D;
    for (const run::PolicyRunStats& p : s.policies) {
      if (p.stats.exact_elements > 0)
        spdlog::info("{}: {} of {} exact elements needed the multiprecision fallback", p.policy,
                     p.stats.fallback_elements, p.stats.exact_elements);
      spdlog::debug("{}: {:.3f} s compute", p.policy, p.seconds);
    }
    spdlog::info("wrote {}: {} policies{}, S={} H={} D={}, device {}, {} slabs of {} tokens, {:.2f} s ({:.1f} M "
                 "outputs/s per policy)",
                 o.output, s.policies.size(), o.backward ? " with backward" : "", s.shape.S, s.shape.H, s.shape.D,
                 s.device, s.slabs, s.slab_tokens, s.seconds_total,
                 double(outputs) * double(s.policies.size()) / s.seconds_total / 1e6);
  });
}

}  // namespace mhc::cli
