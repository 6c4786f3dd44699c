// mhcdiff bench: time every policy's forward and backward against a copy of the same bytes (SPEC §8).
#include <fmt/format.h>

#include <cstdio>
#include <string>
#include <vector>

#include "bench/bench.hpp"
#include "commands.hpp"
#include "io/errors.hpp"
#include "policy/policy_file.hpp"

namespace mhc::cli {

void add_bench_command(CLI::App& app, CommandContext& ctx) {
  struct Args {
    std::vector<std::string> shapes;
    std::string policies = "all";
    std::string device = "auto";
    std::string format = "text";
    std::string dump_dir;
    std::string preset;
    int reps = 0;
    int threads = 0;
    uint64_t seed = 1;
    bool no_backward = false;
  };
  auto args = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand("bench", "time each policy's forward and backward (GB/s, % of a copy)");
  cmd->add_option("--shape", args->shapes, "S,H,D (repeatable); default: SPEC §8's shapes on the GPU, 256,4,4096 on the CPU (H = 2 for --preset "
                  "seed-example)");
  cmd->add_option("--policies", args->policies, "comma-separated policies; all = every built-in")->capture_default_str();
  cmd->add_option("--device", args->device, "auto, cpu or cuda")->capture_default_str();
  cmd->add_option("--reps", args->reps, "timed runs per measurement (median); default 40 on the GPU, 3 on the CPU")
      ->transform(whole_number_in(1, 1000000));
  cmd->add_option("--seed", args->seed, "seed of the random inputs")->transform(seed_check())->capture_default_str();
  CLI::Option* preset = cmd->add_option("--preset", args->preset,
                  "time on `mhcdiff gen`'s inputs of this preset (randn, realistic, cancellation, seed-example; made "
                  "on the host) instead of the bench's own randn-like data");
  cmd->add_option("--threads", args->threads, "CPU threads (0: all)")->transform(thread_count_check())->capture_default_str();
  cmd->add_flag("--no-backward", args->no_backward, "time the forward only");
  cmd->add_option("--format", args->format, "text, csv or markdown")->check(CLI::IsMember({"text", "csv", "markdown"}))
      ->capture_default_str();
  cmd->add_option("--dump", args->dump_dir,
                  "GPU only: write the first shape's inputs and outputs as raw files into this existing directory "
                  "(for scripts/torch_peer.py)");
  cmd->callback([args, preset, &ctx] {
    bench::BenchOptions opt;
    for (const std::string& s : args->shapes) opt.shapes.push_back(bench::parse_shape(s));
    // resolve_policies reads the list as run and explain do (blanks around names allowed); an empty list would
    // mean "every policy" to run_bench.
    opt.policies = resolve_policies(args->policies, {});
    if (opt.policies.empty())
      throw InputError("--policies names no policy to time: give 'all' or a comma-separated list");
    opt.device = resolve_device(args->device);
    opt.reps = args->reps;
    opt.seed = args->seed;
    if (preset->count() > 0) opt.preset = gen::parse_preset(args->preset);  // '' too: refused as unknown
    opt.backward = !args->no_backward;
    opt.threads = args->threads;
    opt.dump_dir = args->dump_dir;
    const bench::BenchReport report = bench::run_bench(opt);
    const std::string text = args->format == "csv"        ? bench::format_csv(report)
                             : args->format == "markdown" ? bench::format_markdown(report)
                                                          : bench::format_text(report);
    io::write_stdout(text);
    ctx.exit_code = 0;
  });
}

}  // namespace mhc::cli
