// mhcdiff fingerprint: which rounding policy, term order, contraction and comb orientation made a candidate
// (SPEC §6). Exit 0 when a single variant or a two-variant lane mixture reproduces it bit for bit, else 1.
#include <spdlog/spdlog.h>

#include <chrono>
#include <cstdio>
#include <memory>

#include "commands.hpp"
#include "input_cli.hpp"
#include "investigate/sources.hpp"
#include "policy/policy_file.hpp"

namespace mhc::cli {

void add_fingerprint_command(CLI::App& app, CommandContext& ctx) {
  struct Args {
    std::string input, candidate, format = "text";
    std::vector<std::string> policy_files;
    investigate::FingerprintOptions o;
    int top = 10;
    InputReadCli read;
  };
  auto args = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand("fingerprint", "find the rounding policy variant that produced a candidate output");
  cmd->add_option("input", args->input, "input file (mhcdiff/1, /inputs group)")->required();
  cmd->add_option("candidate", args->candidate,
                  "the candidate: file.h5, file.h5:NAME (/results/NAME/out), file.h5:/dataset, or policy:NAME")
      ->required();
  cmd->add_option("--policy-file", args->policy_files, "a user policy to add to the lattice; repeatable");
  cmd->add_option("--format", args->format, "text or json")->check(CLI::IsMember({"text", "json"}))->capture_default_str();
  cmd->add_option("--top", args->top, "variants listed in the ranking")->transform(whole_number_in(1, 1000))->capture_default_str();
  cmd->add_option("--sample", args->o.sample_elements, "elements of the sampling stage (all variants)")
      ->transform(whole_number_in(1, int64_t{1} << 40))
      ->capture_default_str();
  cmd->add_option("--survivors", args->o.survivors, "variants verified on every element")
      ->transform(whole_number_in(1, 1000))
      ->capture_default_str();
  cmd->add_option("--threads", args->o.threads, "CPU threads (0: all)")->transform(thread_count_check())->capture_default_str();
  add_input_read_options(cmd, args->read);
  cmd->callback([args, &ctx] {
    const io::ReadOptions read = args->read.options();
    investigate::FingerprintOptions o = args->o;
    const auto user = resolve_policies("", args->policy_files);
    for (const Policy& p : user) o.extra.push_back(investigate::variant_of(p.desc));
    const auto candidate = investigate::resolve_out_source(args->candidate, user);
    const auto start = std::chrono::steady_clock::now();
    const auto rep = investigate::fingerprint_file(args->input, candidate, read, o);
    spdlog::info("fingerprinted {} elements against {} variants in {:.2f} s", rep.shape.S * rep.shape.H * rep.shape.D,
                 rep.lattice_size, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    const std::string out = args->format == "json" ? investigate::format_fingerprint_json(rep, args->top)
                                                   : investigate::format_fingerprint_text(rep, args->top);
    io::write_stdout(out);
    ctx.exit_code = rep.matched() || rep.mixture_matched() ? 0 : 1;
  });
}

}  // namespace mhc::cli
