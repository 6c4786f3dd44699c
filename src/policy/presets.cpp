#include <algorithm>
#include <stdexcept>

#include <fmt/format.h>

#include "policy/policy.hpp"

namespace mhc {
namespace {

// The descriptions live in policy.hpp (constexpr, shared with the CUDA kernels); here they get names.
const std::vector<Policy>& preset_table() {
  static const std::vector<Policy> presets = {
      {"hf-bf16", kHfBf16Desc, "HuggingFace transformers eager (bf16 tensors), xtuner before PR #2260"},
      {"fp32-seeded", kFp32SeededDesc,
       "TileKernels, vLLM/SGLang TileLang, LMDeploy's source order, xtuner after PR #2260, without contraction"},
      {"fp32-seeded-fma", kFp32SeededFmaDesc,
       "the seeded fp32 kernels compiled with FMA contraction (Triton, nvcc --fmad)"},
      {"fp32-mixfirst", kFp32MixFirstDesc, "DeepSeek's inference reference: torch.sum over streams, then + post*x"},
      {"fp64", kFp64Desc, "a float64 upcast reference, seeded order"},
      {"exact", kExactDesc,
       "the exact real result, correctly rounded once (certified double-double, multiprecision fallback)"},
  };
  return presets;
}

struct Alias {
  const char* alias;
  const char* name;
};
constexpr Alias kAliases[] = {
    {"hf", "hf-bf16"}, {"lmdeploy", "fp32-seeded"}, {"deepseek", "fp32-mixfirst"}, {"mpfr", "exact"}, {"truth", "exact"},
};

const char* enum_name(Accumulator v) { return v == Accumulator::fp32 ? "fp32" : v == Accumulator::fp64 ? "fp64" : "exact"; }
const char* enum_name(CoefRounding v) { return v == CoefRounding::fp32 ? "fp32" : "bf16"; }
const char* enum_name(PostTerm v) { return v == PostTerm::fp32 ? "fp32" : v == PostTerm::bf16 ? "bf16" : "fused"; }
const char* enum_name(MixProduct v) { return v == MixProduct::fp32 ? "fp32" : "fused"; }
const char* enum_name(TermOrder v) {
  return v == TermOrder::seeded ? "seeded" : v == TermOrder::mix_first ? "mix-first" : "mix-pairwise";
}
const char* enum_name(MixRounding v) { return v == MixRounding::none ? "none" : "bf16"; }
const char* enum_name(GradProduct v) { return v == GradProduct::fp32 ? "fp32" : "bf16"; }
const char* enum_name(ParamGradRounding v) { return v == ParamGradRounding::none ? "none" : "bf16"; }

}  // namespace

const std::vector<Policy>& builtin_policies() { return preset_table(); }

const Policy& find_policy(const std::string& name_or_alias) {
  std::string name = name_or_alias;
  for (const Alias& a : kAliases)
    if (name == a.alias) name = a.name;
  for (const Policy& p : builtin_policies())
    if (p.name == name) return p;
  std::string known;
  for (const Policy& p : builtin_policies()) known += (known.empty() ? "" : ", ") + p.name;
  throw std::invalid_argument(fmt::format("unknown policy '{}' (known: {}; aliases: hf, lmdeploy, deepseek, mpfr, truth)",
                                          name_or_alias, known));
}

std::vector<Policy> parse_policy_list(const std::string& list) {
  if (list == "all") return builtin_policies();
  std::vector<Policy> out;
  size_t start = 0;
  while (start <= list.size()) {
    size_t comma = list.find(',', start);
    std::string item = list.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    if (item.empty()) throw std::invalid_argument(fmt::format("empty policy name in '{}'", list));
    for (const Policy& p : item == "all" ? builtin_policies() : std::vector<Policy>{find_policy(item)})
      if (std::none_of(out.begin(), out.end(), [&](const Policy& q) { return q.name == p.name; })) out.push_back(p);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

std::string describe(const PolicyDesc& d) {
  if (d.accumulator == Accumulator::exact) return "accumulator=exact";
  return fmt::format(
      "accumulator={} coef={} post_term={} mix_product={} order={} mix_rounding={} grad_product={} "
      "param_grad_rounding={} grad_contract={}",
      enum_name(d.accumulator), enum_name(d.coef), enum_name(d.post_term), enum_name(d.mix_product), enum_name(d.order),
      enum_name(d.mix_rounding), enum_name(d.grad_product), enum_name(d.param_grad_rounding), d.grad_contract);
}

}  // namespace mhc
