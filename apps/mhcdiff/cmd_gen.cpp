// mhcdiff gen: write a preset input file (SPEC §7).
#include <spdlog/spdlog.h>

#include <fmt/format.h>

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "commands.hpp"
#include "gen/presets.hpp"
#include "io/errors.hpp"

namespace mhc::cli {
void add_gen_command(CLI::App& app, CommandContext&) {
  struct Args {
    std::string preset = "randn", output;
    std::optional<std::string> shape;  // not given: gen::default_shape
    uint64_t seed = 0;
    bool grad = false;
    int compress = 0;
    gen::GenOptions knobs;
  };
  auto args = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand("gen", "write a deterministic input file from a preset (SPEC §7)");
  cmd->add_option("--preset", args->preset, "seed-example | randn | realistic | cancellation")->capture_default_str();
  cmd->add_option("--shape", args->shape,
                  "S,H,D (tokens, streams 1..16, hidden size); default 16,4,64, for seed-example 16,2,64");
  cmd->add_option("--seed", args->seed, "seed of the counter-based generator")->transform(seed_check())->capture_default_str();
  cmd->add_flag("--grad", args->grad, "also write /inputs/grad_out (needed by run --backward)");
  cmd->add_option("-o,--output", args->output, "output file (written atomically)")->required();
  // Each preset's own knobs; giving one to another preset is a usage error (it would be silently ignored).
  const std::vector<std::pair<CLI::Option*, const char*>> knobs = {
      {cmd->add_option("--sigma", args->knobs.sigma, "realistic: std-dev of the Sinkhorn logits")->capture_default_str(),
       "realistic"},
      {cmd->add_option("--rho", args->knobs.rho, "realistic: residual rms / rms(x) per token")->capture_default_str(),
       "realistic"},
      {cmd->add_option("--sinkhorn-iterations", args->knobs.sinkhorn_iterations, "realistic: Sinkhorn iterations")
           ->transform(whole_number_in(1, gen::kMaxSinkhornIterations))
           ->capture_default_str(),
       "realistic"},
      {cmd->add_option("--sinkhorn-eps", args->knobs.sinkhorn_eps, "realistic: Sinkhorn eps")->capture_default_str(),
       "realistic"},
      {cmd->add_option("--kappa-min", args->knobs.kappa_min, "cancellation: smallest target condition number")
           ->capture_default_str(),
       "cancellation"},
      {cmd->add_option("--kappa-max", args->knobs.kappa_max, "cancellation: largest target condition number")
           ->capture_default_str(),
       "cancellation"}};
  cmd->add_option("--compress", args->compress, "shuffle+deflate level 0..9 (0: none)")
      ->transform(whole_number_in(0, 9))
      ->capture_default_str();
  cmd->callback([args, knobs] {
    for (const auto& [option, preset] : knobs)
      if (option->count() > 0 && args->preset != preset)
        throw InputError(fmt::format("{} applies to --preset {} only (got --preset {})", option->get_name(), preset,
                                     args->preset));
    gen::GenOptions o = args->knobs;
    o.preset = gen::parse_preset(args->preset);
    o.shape = args->shape ? gen::parse_shape(*args->shape) : gen::default_shape(o.preset);
    o.seed = args->seed;
    o.grad = args->grad;
    gen::write_generated(o, args->output, args->compress);
    spdlog::info("wrote {}: preset {}, S={}, H={}, D={}, seed {}{}", args->output, args->preset, o.shape.S, o.shape.H,
                 o.shape.D, o.seed, o.grad ? ", with grad_out" : "");
  });
}

}  // namespace mhc::cli
