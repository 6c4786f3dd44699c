// mhcdiff's CPU policies against independent references (issue #2): PyTorch's own CPU arithmetic for the
// HF eager expression, DeepSeek's fp32 reference, the seeded fp32 loop and its float64 version
// (refs/torch_refs.py), and Python's correctly rounded math.fsum for the exact policy (refs/exact_fsum.py).
// The inputs are generated here with a private RNG, so the references see nothing of mhcdiff but raw bytes.
//
// Every tensor PyTorch defines exactly must be bit-equal. Tensors whose reduction order PyTorch leaves to
// its kernels (sums over D; sums over more than 4 streams; the bf16 matmul where the probe finds a
// non-sequential order) are compared by counting mismatches and by requiring both sides to lie within the
// rounding-error bound of the exact value (docs/references.md explains each case and records the counts).
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iomanip>
#include <iostream>
#include <limits>
#include <numbers>
#include <sstream>
#include <string>
#include <vector>

#include <unistd.h>

#include "kernels/cpu/operator_cpu.hpp"
#include "policy/policy.hpp"

namespace mhc {
namespace {

namespace fs = std::filesystem;

constexpr const char* kPython = "/usr/bin/python3";  // Debian's python with torch 1.13; `python3` on PATH may lack it

// ---- Local bf16 helpers, written out so the expected side uses no mhcdiff arithmetic --------------

uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
float float_of(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
uint64_t bits_of(double v) {
  uint64_t u;
  std::memcpy(&u, &v, 8);
  return u;
}
uint16_t bf16_bits_rne(float f) {  // finite inputs only (the generators make no NaN)
  uint32_t u = bits_of(f);
  return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
float bf16_value(uint16_t b) { return float_of(uint32_t(b) << 16); }
float round_bf16(float f) { return bf16_value(bf16_bits_rne(f)); }

// ---- Deterministic inputs -------------------------------------------------------------------------

// SplitMix64 (Steele, Lea & Flood 2014): tiny, well mixed, and identical on every platform, unlike the
// distributions of <random>, whose outputs the standard leaves implementation-defined.
class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : state_(seed) {}
  uint64_t next() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  double uniform() { return double(next() >> 11) * 0x1p-53; }  // [0, 1)
  int below(int n) { return int(next() % uint64_t(n)); }
  double sign() { return (next() & 1) ? -1.0 : 1.0; }
  double normal() {  // Box-Muller; std::log/cos are not bit-identical everywhere, but any value is a fine input
    const double u1 = 1.0 - uniform(), u2 = uniform();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
  }

 private:
  uint64_t state_;
};

struct Config {
  std::string name;
  Shape shape;
  bool subnormal_inputs = false;  // oneDNN flushes subnormals: bmm-based HF tensors are not bit-comparable
  bool signed_zeros = false;      // only for the signed-zero test
  bool overflow = false;          // only for math.fsum: results at binary32's (and bf16's) overflow threshold
};

// Token kinds, cycled over s: each configuration holds all four.
enum class TokenKind { randn, ties, cancellation, wide_magnitudes };

struct InputsBuilder {
  Inputs in;
  SplitMix64 rng;

  InputsBuilder(const Shape& sh, uint64_t seed) : rng(seed) {
    in.shape = sh;
    const size_t shd = size_t(sh.S) * sh.H * sh.D;
    in.x.assign(size_t(sh.S) * sh.D, 0);
    in.residual.assign(shd, 0);
    in.grad_out.assign(shd, 0);
    in.post.assign(size_t(sh.S) * sh.H, 0.0f);
    in.comb.assign(size_t(sh.S) * sh.H * sh.H, 0.0f);
  }
  int H() const { return in.shape.H; }
  int64_t D() const { return in.shape.D; }
  uint16_t& x(int64_t s, int64_t d) { return in.x[s * D() + d]; }
  uint16_t& r(int64_t s, int k, int64_t d) { return in.residual[(s * H() + k) * D() + d]; }
  uint16_t& g(int64_t s, int ho, int64_t d) { return in.grad_out[(s * H() + ho) * D() + d]; }
  float& post(int64_t s, int ho) { return in.post[s * H() + ho]; }
  float& comb(int64_t s, int src, int dst) { return in.comb[(s * H() + src) * H() + dst]; }
  uint16_t bf(double v) { return bf16_bits_rne(float(v)); }

  void randn_token(int64_t s) {
    for (int64_t d = 0; d < D(); ++d) x(s, d) = bf(rng.normal());
    for (int k = 0; k < H(); ++k)
      for (int64_t d = 0; d < D(); ++d) r(s, k, d) = bf(rng.normal()), g(s, k, d) = bf(rng.normal());
    for (int ho = 0; ho < H(); ++ho) post(s, ho) = float(2.0 * rng.uniform());
    for (int a = 0; a < H(); ++a)
      for (int b = 0; b < H(); ++b) comb(s, a, b) = float(rng.uniform());
  }

  // Coefficients on and next to bf16 midpoints (HF's .to(bfloat16) ties), and stream values built so the
  // sums land on bf16 ties that tiny, order-dependent terms decide.
  float tie_coefficient() {
    static constexpr uint32_t kLow[] = {0x0000, 0x8000, 0x7fff, 0x8001, 0x4000, 0xc000};
    const uint16_t hi = bf(std::ldexp(1.0 + rng.below(128) / 128.0, rng.below(4) - 2));
    return float_of((uint32_t(hi) << 16) | kLow[rng.below(6)]);
  }
  double tiny_term() { return rng.sign() * std::ldexp(1.0 + rng.below(4) / 4.0, -16 - rng.below(15)); }
  void tie_column(const std::function<uint16_t&(int)>& v) {
    for (int k = 0; k < H(); ++k) v(k) = bf(tiny_term());
    const int big = rng.below(H());
    v(big) = bf(rng.sign() * (1.0 + rng.below(4) / 128.0));
    if (H() == 1) return;
    const int tie = (big + 1 + rng.below(H() - 1)) % H();
    v(tie) = bf(rng.sign() * 0x1p-8);
  }
  void ties_token(int64_t s) {
    for (int64_t d = 0; d < D(); ++d) x(s, d) = bf(rng.sign() * std::ldexp(1.0 + rng.below(8) / 8.0, rng.below(5) - 2));
    for (int ho = 0; ho < H(); ++ho) post(s, ho) = tie_coefficient();
    for (int a = 0; a < H(); ++a)
      for (int b = 0; b < H(); ++b) comb(s, a, b) = rng.below(2) ? 1.0f : tie_coefficient();
    for (int64_t d = 0; d < D(); ++d) {
      tie_column([&](int k) -> uint16_t& { return r(s, k, d); });
      tie_column([&](int ho) -> uint16_t& { return g(s, ho, d); });
    }
  }

  // Catastrophic cancellation: out[s,0,d] (x chosen against the mix), ∂x (last gradient stream against the
  // others) and ∂post (adjacent products of opposite sign over d).
  void cancellation_token(int64_t s) {
    randn_token(s);
    for (int ho = 0; ho < H(); ++ho) post(s, ho) = float(0.25 + 2.0 * rng.uniform());
    for (int64_t d = 0; d < D(); ++d) {
      double mix = 0;
      for (int k = 0; k < H(); ++k) mix += double(comb(s, k, 0)) * bf16_value(r(s, k, d));
      x(s, d) = bf(-mix / post(s, 0));
      if (x(s, d) == 0 || x(s, d) == 0x8000) x(s, d) = bf(0.5);
    }
    for (int ho = 0; ho + 1 < H(); ++ho)
      for (int64_t d = 0; d + 1 < D(); d += 2)
        g(s, ho, d + 1) = bf(-double(bf16_value(g(s, ho, d))) * bf16_value(x(s, d)) / bf16_value(x(s, d + 1)));
    if (H() > 1)
      for (int64_t d = 0; d < D(); ++d) {
        double sum = 0;
        for (int ho = 0; ho + 1 < H(); ++ho) sum += double(post(s, ho)) * bf16_value(g(s, ho, d));
        g(s, H() - 1, d) = bf(-sum / post(s, H() - 1));
        if ((g(s, H() - 1, d) & 0x7fff) == 0) g(s, H() - 1, d) = bf(0.25);
      }
  }

  // Magnitudes over 2^±40 (values) and 2^±20 (coefficients): every product stays a normal fp32 number.
  void wide_token(int64_t s) {
    auto wide = [&](int e) { return rng.normal() * std::ldexp(1.0, rng.below(2 * e + 1) - e); };
    for (int64_t d = 0; d < D(); ++d) x(s, d) = bf(wide(40));
    for (int k = 0; k < H(); ++k)
      for (int64_t d = 0; d < D(); ++d) r(s, k, d) = bf(wide(40)), g(s, k, d) = bf(wide(40));
    for (int ho = 0; ho < H(); ++ho) post(s, ho) = float((0.125 + rng.uniform()) * std::ldexp(1.0, rng.below(41) - 20));
    for (int a = 0; a < H(); ++a)
      for (int b = 0; b < H(); ++b) comb(s, a, b) = float((0.125 + rng.uniform()) * std::ldexp(1.0, rng.below(41) - 20));
  }

  // Subnormal bf16 values and products that underflow fp32 (gradual underflow in IEEE; flushed by oneDNN).
  void subnormal_token(int64_t s) {
    auto tiny = [&]() -> uint16_t {
      switch (rng.below(3)) {
        case 0: return uint16_t((rng.next() & 0x8000) | (1 + rng.below(0x7f)));  // bf16 subnormal
        case 1: return bf(rng.sign() * std::ldexp(1.0 + rng.uniform(), -126 + rng.below(6)));
        default: return bf(rng.normal() * 0x1p-100);
      }
    };
    for (int64_t d = 0; d < D(); ++d) x(s, d) = tiny();
    for (int k = 0; k < H(); ++k)
      for (int64_t d = 0; d < D(); ++d) r(s, k, d) = tiny(), g(s, k, d) = tiny();
    for (int ho = 0; ho < H(); ++ho) post(s, ho) = float(rng.uniform() * 0x1p-10);
    for (int a = 0; a < H(); ++a)
      for (int b = 0; b < H(); ++b) comb(s, a, b) = float(rng.uniform() * 0x1p-10);
  }

  // Sums at the top of the range, which bf16 and binary32 share (2^128): on every third d, out[s,0,d],
  // ∂x[s,d] and ∂residual[s,0,d] are exactly the bf16 overflow midpoint 2^128 − 2^119 (between the largest
  // finite bf16, 2^128 − 2^120, and 2^128), which ties to even and so to infinity, plus a tie-breaker of
  // ±2^-140 or 0 (a third each; −2^-140 rounds to the largest finite); elsewhere values of 2^118 to 2^127 with
  // random signs, whose sums over D overflow binary32. The whole token is negated at random.
  void overflow_token(int64_t s) {
    constexpr uint16_t kTwo127 = 0x7f00, kTwo127MinusHalfUlp = 0x7eff;  // 2^127, 2^127 − 2^119
    auto top = [&]() -> uint16_t { return uint16_t((rng.next() & 0x8000) | (0x7a80 + rng.below(0x480))); };
    for (int64_t d = 0; d < D(); ++d) {
      x(s, d) = top();
      for (int k = 0; k < H(); ++k) r(s, k, d) = top(), g(s, k, d) = top();
    }
    for (int ho = 0; ho < H(); ++ho) post(s, ho) = float(0.5 + rng.uniform());
    for (int a = 0; a < H(); ++a)
      for (int b = 0; b < H(); ++b) comb(s, a, b) = float(0.5 + rng.uniform());
    // The tie: post·x + comb·r for out (streams 0 and 1 of comb's column 0, the rest zero but stream 2's
    // tie-breaker), post·g for ∂x and comb's row 0 times g for ∂residual[0], each from streams 0, 1 and 2.
    post(s, 0) = post(s, 1) = 1.0f;
    post(s, 2) = 0x1p-140f;
    for (int k = 0; k < H(); ++k) comb(s, k, 0) = 0.0f;
    comb(s, 0, 0) = 1.0f, comb(s, 1, 0) = 0x1p-140f;
    comb(s, 0, 1) = 1.0f, comb(s, 0, 2) = 0x1p-140f;
    for (int ho = 3; ho < H(); ++ho) post(s, ho) = comb(s, 0, ho) = 0.0f;
    const uint16_t sign = rng.below(2) ? 0x8000 : 0;
    for (int64_t d = 0; d < D(); d += 3) {
      const uint16_t breaker[] = {0x0000, 0x3f80, 0xbf80};  // 0, +1, −1 (times 2^-140)
      const uint16_t b = breaker[rng.below(3)];
      x(s, d) = kTwo127, r(s, 0, d) = kTwo127MinusHalfUlp, r(s, 1, d) = b;
      g(s, 0, d) = kTwo127, g(s, 1, d) = kTwo127MinusHalfUlp, g(s, 2, d) = b;
    }
    if (sign) {
      for (int64_t d = 0; d < D(); ++d) {
        x(s, d) ^= sign;
        for (int k = 0; k < H(); ++k) r(s, k, d) ^= sign, g(s, k, d) ^= sign;
      }
    }
  }

  // x = residual = -0 everywhere, grad_out = -0: every product is -0 (see the signed-zero test).
  void signed_zero_token(int64_t s) {
    randn_token(s);
    std::fill(in.x.begin() + s * D(), in.x.begin() + (s + 1) * D(), uint16_t(0x8000));
    std::fill(in.residual.begin() + s * H() * D(), in.residual.begin() + (s + 1) * H() * D(), uint16_t(0x8000));
    std::fill(in.grad_out.begin() + s * H() * D(), in.grad_out.begin() + (s + 1) * H() * D(), uint16_t(0x8000));
  }
};

Inputs make_inputs(const Config& c, uint64_t seed) {
  InputsBuilder b(c.shape, seed);
  for (int64_t s = 0; s < c.shape.S; ++s) {
    if (c.signed_zeros) b.signed_zero_token(s);
    else if (c.overflow) b.overflow_token(s);
    else if (c.subnormal_inputs) b.subnormal_token(s);
    else switch (TokenKind(s % 4)) {
        case TokenKind::randn: b.randn_token(s); break;
        case TokenKind::ties: b.ties_token(s); break;
        case TokenKind::cancellation: b.cancellation_token(s); break;
        case TokenKind::wide_magnitudes: b.wide_token(s); break;
      }
  }
  return std::move(b.in);
}

std::vector<Config> configs() {
  std::vector<Config> out;
  for (int H : {1, 2, 4, 8})
    for (int64_t D : {31, 257, 2053, 4096}) {
      // 12 tokens (3 of each kind), more where needed for PyTorch's bf16 bmm to take its oneDNN path
      // (batch·H·H·D > 4096, docs/references.md); below that size it accumulates in bf16.
      int64_t S = 12;
      if (H > 1) S = std::max<int64_t>(S, (4096 / (int64_t(H) * H * D) + 4) / 4 * 4);
      std::ostringstream name;
      name << 'h' << H << "_d" << D;
      out.push_back({name.str(), {S, H, D}});
    }
  out.push_back({"h4_d31_small", {2, 4, 31}});  // below the oneDNN size: PyTorch's bf16-accumulating bmm
  out.push_back({"h4_d257_subnormal", {12, 4, 257}, true});
  out.push_back({"h2_d64_signed_zeros", {36, 2, 64}, false, true});
  out.push_back({"h4_d64_overflow", {8, 4, 64}, false, false, true});
  return out;
}

// ---- Running the Python references --------------------------------------------------------------

template <class T>
void write_raw(const fs::path& p, const std::vector<T>& v) {  // the host is little-endian (x86-64, aarch64)
  std::ofstream f(p, std::ios::binary);
  f.write(reinterpret_cast<const char*>(v.data()), std::streamsize(v.size() * sizeof(T)));
  if (!f) throw std::runtime_error("cannot write " + p.string());
}

template <class T>
std::vector<T> read_raw(const fs::path& p, size_t count) {
  std::ifstream f(p, std::ios::binary | std::ios::ate);
  if (!f) throw std::runtime_error("reference output missing: " + p.string());
  const auto bytes = size_t(f.tellg());
  if (bytes != count * sizeof(T))
    throw std::runtime_error(p.string() + ": " + std::to_string(bytes) + " bytes, expected " +
                             std::to_string(count * sizeof(T)));
  std::vector<T> v(count);
  f.seekg(0);
  f.read(reinterpret_cast<char*>(v.data()), std::streamsize(bytes));
  return v;
}

std::string read_text(const fs::path& p) {
  std::ifstream f(p);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

uint64_t fnv1a(uint64_t h, const void* data, size_t n) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 0x100000001b3ull;
  return h;
}

struct ConfigData {
  Config config;
  Inputs inputs;
};

// Where a run of `script` over `data` is kept. ctest runs each TEST in its own process: the directory is
// keyed by a hash of the script and the inputs, so the first process computes and the others reuse it.
fs::path run_directory(const std::string& script, const std::vector<ConfigData>& data) {
  const std::string script_text = read_text(fs::path(MHCDIFF_SOURCE_DIR) / "refs" / script);
  uint64_t h = fnv1a(0xcbf29ce484222325ull, script_text.data(), script_text.size());
  for (const ConfigData& c : data) {
    h = fnv1a(h, c.config.name.data(), c.config.name.size());
    h = fnv1a(h, c.inputs.x.data(), c.inputs.x.size() * 2);
    h = fnv1a(h, c.inputs.residual.data(), c.inputs.residual.size() * 2);
    h = fnv1a(h, c.inputs.grad_out.data(), c.inputs.grad_out.size() * 2);
    h = fnv1a(h, c.inputs.post.data(), c.inputs.post.size() * 4);
    h = fnv1a(h, c.inputs.comb.data(), c.inputs.comb.size() * 4);
  }
  std::ostringstream key;
  key << "mhcdiff_" << fs::path(script).stem().string() << "_" << std::hex << h;
  return fs::temp_directory_path() / key.str();
}

// Writes every configuration's inputs, runs `script` once over all of them, and publishes the outputs in
// `done` (atomically: a rename of the finished directory).
void run_reference(const std::string& script, const std::vector<ConfigData>& data, const fs::path& done) {
  const fs::path script_path = fs::path(MHCDIFF_SOURCE_DIR) / "refs" / script;
  const fs::path work = done.string() + ".tmp" + std::to_string(getpid());
  fs::remove_all(work);
  fs::create_directories(work);
  std::ofstream manifest(work / "manifest.txt");
  for (const ConfigData& c : data) {
    const Shape& sh = c.config.shape;
    manifest << c.config.name << ' ' << sh.S << ' ' << sh.H << ' ' << sh.D << '\n';
    const fs::path base = work / c.config.name;
    write_raw(base.string() + ".x", c.inputs.x);
    write_raw(base.string() + ".residual", c.inputs.residual);
    write_raw(base.string() + ".grad_out", c.inputs.grad_out);
    write_raw(base.string() + ".post", c.inputs.post);
    write_raw(base.string() + ".comb", c.inputs.comb);
  }
  manifest.close();
  const std::string cmd = std::string(kPython) + " '" + script_path.string() + "' '" + work.string() + "' > '" +
                          (work / "log.txt").string() + "' 2>&1";
  if (std::system(cmd.c_str()) != 0)
    throw std::runtime_error(script + " failed:\n" + read_text(work / "log.txt"));
  std::ofstream(work / "complete") << "ok\n";
  std::error_code ec;
  fs::rename(work, done, ec);  // another process may have finished first: then use its copy
  if (ec) {
    fs::remove_all(work);
    if (!fs::exists(done / "complete")) throw std::runtime_error("cannot publish " + done.string());
  }
}

// ---- Comparisons ------------------------------------------------------------------------------------

// Ordered integer for ULP distances in the tensor's own format; +0 and -0 are 0 apart.
int64_t ordered(uint16_t b) { return (b & 0x8000) ? -int64_t(b & 0x7fff) : int64_t(b); }
int64_t ordered(float f) {
  const uint32_t u = bits_of(f);
  return (u & 0x80000000u) ? -int64_t(u & 0x7fffffffu) : int64_t(u);
}
double value_of(uint16_t b) { return bf16_value(b); }
double value_of(float f) { return f; }
double value_of(double v) { return v; }
uint64_t raw_bits(uint16_t b) { return b; }
uint64_t raw_bits(float f) { return bits_of(f); }
uint64_t raw_bits(double v) { return bits_of(v); }
int64_t ulp_distance(uint16_t a, uint16_t b) { return std::llabs(ordered(a) - ordered(b)); }
int64_t ulp_distance(float a, float b) { return std::llabs(ordered(a) - ordered(b)); }
int64_t ulp_distance(double a, double b) {
  auto o = [](double v) {
    const uint64_t u = bits_of(v);
    return (u >> 63) ? -int64_t(u & ~(1ull << 63)) : int64_t(u);
  };
  return std::llabs(o(a) - o(b));
}

std::string index_string(const std::vector<int64_t>& dims, int64_t flat) {
  std::vector<int64_t> idx(dims.size());
  for (size_t i = dims.size(); i-- > 0;) idx[i] = flat % dims[i], flat /= dims[i];
  std::ostringstream s;  // (streams, not string concatenation: GCC 12 -Wrestrict false positive, PR 105651)
  for (size_t i = 0; i < idx.size(); ++i) s << (i ? ',' : '(') << idx[i];
  s << ')';
  return s.str();
}

template <class T>
std::string show(T v) {
  std::ostringstream o;
  o << std::setprecision(17) << value_of(v) << " [0x" << std::hex << raw_bits(v) << "]";
  return o.str();
}

struct Mismatches {
  int64_t count = 0;      // bitwise, +0 vs -0 included (SPEC §5)
  int64_t first = -1;     // first bitwise mismatch
  int64_t max_ulp = 0;
  int64_t zero_sign = 0;  // of which +0 vs -0 (see SignedZeroSumsMatchPyTorch)
  int64_t first_value = -1;  // first mismatch that is not only the sign of a zero
};

template <class T>
Mismatches count_mismatches(const std::vector<T>& a, const std::vector<T>& b) {
  Mismatches m;
  for (size_t i = 0; i < a.size(); ++i)
    if (raw_bits(a[i]) != raw_bits(b[i])) {
      if (m.count++ == 0) m.first = int64_t(i);
      m.max_ulp = std::max(m.max_ulp, ulp_distance(a[i], b[i]));
      if (value_of(a[i]) == 0 && value_of(b[i]) == 0) ++m.zero_sign;
      else if (m.first_value < 0) m.first_value = int64_t(i);
    }
  return m;
}

// The exact value of one output element and a bound on the rounding error any evaluation order can make.
struct TruthBound {
  double truth = 0;
  double bound = 0;
};

constexpr double kU32 = 0x1p-24;  // unit roundoff of binary32
constexpr double kUBf = 0x1p-8;   // unit roundoff of bf16

// gamma_n = n·u / (1 - n·u); infinite where n·u >= 1 (no worst-case bound: a bf16 accumulator over 256 terms).
double gamma(int64_t n, double unit) {
  const double nu = double(n) * unit;
  return nu < 1 ? nu / (1.0 - nu) : std::numeric_limits<double>::infinity();
}

// Terms t_i (exact in binary64) are each rounded with unit `product_unit` (0: exact), summed in any order
// in a format of unit `sum_unit` (Higham, Accuracy and Stability §4.2: |error| <= gamma_{n-1} Σ|t_i|), and
// the sum is rounded to bf16 when `result_bf16`. The absolute slack covers underflow (gradual or flushed, one 2^-126 per term) and
// the binary64 accumulation of the truth here.
TruthBound sum_bound(const std::vector<double>& terms, double product_unit, bool result_bf16,
                     double sum_unit = kU32) {
  double truth = 0, abs_sum = 0;
  for (double t : terms) truth += t, abs_sum += std::fabs(t);
  const auto n = int64_t(terms.size());
  const double e_products = product_unit * abs_sum;
  double e = e_products + gamma(n - 1, sum_unit) * (abs_sum + e_products);
  if (result_bf16) e += kUBf * (std::fabs(truth) + e);
  e += double(n + 2) * 0x1p-126 + 2.0 * double(n) * 0x1p-53 * abs_sum;
  return {truth, e * (1 + 0x1p-20)};
}

// The binary64 analogue for the fp64 policy's gradients: products are exact in binary64, the sum is
// binary64 in any order, the truth is accumulated in long double (and its rounding to double is added).
TruthBound sum_bound_f64(const std::vector<double>& terms) {
  long double truth = 0, abs_sum = 0;
  for (double t : terms) truth += t, abs_sum += std::fabs(t);
  const auto n = int64_t(terms.size());
  double e = gamma(n - 1, 0x1p-53) * double(abs_sum);
  e += 2.0 * double(n) * 0x1p-63 * double(abs_sum) + 0x1p-53 * std::fabs(double(truth)) + double(n) * 0x1p-1074;
  return {double(truth), e * (1 + 0x1p-20)};
}

// Strips the "_f64" of a binary64 copy's name.
std::string base_tensor(const std::string& tensor) { return tensor.substr(0, tensor.find("_f64")); }

enum class Ref { hf, deepseek, seeded, fp64 };
const char* ref_name(Ref r) {
  switch (r) {
    case Ref::hf: return "hf";
    case Ref::deepseek: return "deepseek";
    case Ref::seeded: return "seeded";
    case Ref::fp64: return "fp64";
  }
  return "?";
}

// The exact value and error bound of element i of `tensor` under the reference's rounding model.
// `bf16_bmm` says PyTorch's bf16 matmul accumulates in bf16 here (ATen's own kernel, small sizes).
TruthBound truth_bound(Ref ref, const std::string& name, const Inputs& in, int64_t i, bool bf16_bmm) {
  const std::string tensor = base_tensor(name);
  const bool f64 = tensor != name;
  // The fp32 models below, or the binary64 one for the fp64 policy's *_f64 gradients.
  auto model_bound = [&](const std::vector<double>& terms, double product_unit, bool result_bf16,
                         double sum_unit = kU32) {
    return f64 ? sum_bound_f64(terms) : sum_bound(terms, product_unit, result_bf16, sum_unit);
  };
  const int H = in.shape.H;
  const int64_t D = in.shape.D;
  const bool hf = ref == Ref::hf;
  auto coef = [&](float v) -> double { return hf ? round_bf16(v) : v; };
  auto x = [&](int64_t s, int64_t d) -> double { return bf16_value(in.x[s * D + d]); };
  auto r = [&](int64_t s, int k, int64_t d) -> double { return bf16_value(in.residual[(s * H + k) * D + d]); };
  auto g = [&](int64_t s, int ho, int64_t d) -> double { return bf16_value(in.grad_out[(s * H + ho) * D + d]); };
  auto post = [&](int64_t s, int ho) { return coef(in.post[s * H + ho]); };
  auto comb = [&](int64_t s, int src, int dst) { return coef(in.comb[(s * H + src) * H + dst]); };
  std::vector<double> terms;
  if (tensor == "out") {
    const int64_t d = i % D, ho = (i / D) % H, s = i / (D * H);
    for (int k = 0; k < H; ++k) terms.push_back(comb(s, k, ho) * r(s, k, d));
    if (!hf) {
      terms.push_back(post(s, ho) * x(s, d));
      return model_bound(terms, kU32, true);
    }
    // HF: m = RNb(Σ cb·r), q = RNb(pb·x) (exact product, one rounding), out = RNb(RN32(q + m)).
    const TruthBound m = bf16_bmm ? model_bound(terms, kUBf, true, kUBf) : model_bound(terms, 0.0, true);
    const double q = round_bf16(float(post(s, ho) * x(s, d)));
    const double truth = q + m.truth;
    const double e = m.bound + kU32 * (std::fabs(truth) + m.bound) + kUBf * (1 + kU32) * (std::fabs(truth) + m.bound);
    return {truth, e * (1 + 0x1p-20) + 0x1p-126};
  }
  // Backward. HF multiplies post-path products in bf16; the fp32 references round c·g, p·g to fp32.
  if (tensor == "grad_x") {
    const int64_t d = i % D, s = i / D;
    for (int ho = 0; ho < H; ++ho) terms.push_back(post(s, ho) * g(s, ho, d));
    return model_bound(terms, hf ? kUBf : kU32, true);
  }
  if (tensor == "grad_residual") {
    const int64_t d = i % D, hi = (i / D) % H, s = i / (D * H);
    for (int ho = 0; ho < H; ++ho) terms.push_back(comb(s, int(hi), ho) * g(s, ho, d));
    if (hf && bf16_bmm) return model_bound(terms, kUBf, true, kUBf);
    return model_bound(terms, hf ? 0.0 : kU32, true);
  }
  if (tensor == "grad_post") {
    const int64_t ho = i % H, s = i / H;
    for (int64_t d = 0; d < D; ++d) terms.push_back(g(s, int(ho), d) * x(s, d));
    return model_bound(terms, hf ? kUBf : 0.0, hf);
  }
  if (tensor == "grad_comb") {
    const int64_t ho = i % H, hi = (i / H) % H, s = i / (H * H);
    for (int64_t d = 0; d < D; ++d) terms.push_back(g(s, int(ho), d) * r(s, int(hi), d));
    if (hf && bf16_bmm) return model_bound(terms, kUBf, true, kUBf);
    return model_bound(terms, 0.0, hf);
  }
  throw std::logic_error("no error model for " + tensor);
}

std::vector<int64_t> dims_of(const std::string& name, const Shape& sh) {
  const std::string tensor = base_tensor(name);
  if (tensor == "grad_x") return {sh.S, sh.D};
  if (tensor == "grad_post") return {sh.S, sh.H};
  if (tensor == "grad_comb") return {sh.S, sh.H, sh.H};
  return {sh.S, sh.H, sh.D};
}

// ---- Which tensors PyTorch defines exactly -------------------------------------------------------
// (docs/references.md, "What PyTorch 1.13 computes on the CPU")

// ATen's sum over a small non-innermost dimension adds the rows in order from +0 where it vectorises, but
// its scalar tail path keeps 4 interleaved partial sums: sequential only for at most 4 rows.
bool small_dim_sum_is_sequential(int rows) { return rows <= 4; }

// The bf16 batched matmul is a sequential fp32 sum where the probe says so (oneDNN widening to fp32, or
// vdpbf16ps, whose pair order is sequential for H <= 2); oneDNN flushes subnormals.
bool bf16_bmm_is_sequential(const std::string& probe, const Config& c) {
  return !c.subnormal_inputs && probe.find("fp32-sequential") != std::string::npos;
}

bool requires_bit_equality(Ref ref, const std::string& name, const Config& c, const std::string& probe) {
  const int H = c.shape.H;
  const std::string tensor = base_tensor(name);
  if (name == "out_f64") return true;                                // elementwise float64
  if (tensor == "grad_post" || tensor == "grad_comb") return false;  // sums over D in PyTorch's order
  switch (ref) {
    case Ref::hf:
      if (tensor == "grad_x") return small_dim_sum_is_sequential(H);  // torch.sum over the H axis (bf16)
      return bf16_bmm_is_sequential(probe, c);                       // out, grad_residual: bmm
    case Ref::deepseek:                                                // torch.sum over src; over H in backward
    case Ref::seeded:
      if (ref == Ref::seeded && tensor == "out") return true;          // elementwise loop, no reduction
      return small_dim_sum_is_sequential(H);
    case Ref::fp64: return small_dim_sum_is_sequential(H);           // grad_x_f64, grad_residual_f64
  }
  return true;
}

// ---- The fixture -------------------------------------------------------------------------------------

struct ReferenceRun {
  std::vector<ConfigData> data;
  fs::path dir;
  std::string env;  // torch_env.txt
  std::string skip_reason;
  std::string error;
};

// Runs `script` (which needs the Python `modules`) once per process over every configuration.
ReferenceRun make_run(const std::string& script, const std::string& modules) {
  ReferenceRun r;
  uint64_t seed = 20260402;
  for (const Config& c : configs()) r.data.push_back({c, make_inputs(c, seed++)});
  r.dir = run_directory(script, r.data);
  if (fs::exists(r.dir / "complete")) {  // computed by an earlier process: no Python needed
    if (fs::exists(r.dir / "torch_env.txt")) r.env = read_text(r.dir / "torch_env.txt");
    return r;
  }
  if (!fs::exists(kPython)) {
    r.skip_reason = std::string(kPython) + " not found";
    return r;
  }
  if (std::system((std::string(kPython) + " -c 'import " + modules + "' > /dev/null 2>&1").c_str()) != 0) {
    r.skip_reason = std::string(kPython) + " cannot import " + modules + " (Debian: apt-get install python3-torch)";
    return r;
  }
  try {
    run_reference(script, r.data, r.dir);
    if (fs::exists(r.dir / "torch_env.txt")) r.env = read_text(r.dir / "torch_env.txt");
  } catch (const std::exception& e) {
    r.error = e.what();
  }
  return r;
}

const ReferenceRun& torch_run() {
  static const ReferenceRun run = make_run("torch_refs.py", "torch, numpy");
  return run;
}

const ReferenceRun& fsum_run() {
  static const ReferenceRun run = make_run("exact_fsum.py", "numpy");
  return run;
}

// refs/torch_refs.py's finding for the bf16 bmm of this shape: the stream mix (and the residual gradient,
// same shapes) and the comb gradient (a sum over D).
struct Probe {
  std::string bmm, bmm_over_d;
};

Probe probe_of(const ReferenceRun& run, const Config& c) {
  Probe p;
  std::istringstream in(read_text(run.dir / (c.name + ".probe")));
  for (std::string line; std::getline(in, line);) {
    const auto eq = line.find('=');
    if (eq == std::string::npos) continue;
    const std::string key = line.substr(0, eq), value = line.substr(eq + 1);
    if (key == "hf_bmm") p.bmm = value;
    if (key == "hf_bmm_over_d") p.bmm_over_d = value;
  }
  return p;
}

struct TensorCheck {
  std::string label;
  int64_t elements = 0;
  Mismatches mism;
  bool bit_exact_required = false;
  double worst_torch = 0, worst_mhc = 0;  // max |y - truth| / bound
  int64_t unbounded = 0;                  // elements without a finite error bound
};

// Compares one tensor; records failures with the first differing index. Unless `zero_signs`, a +0/-0
// difference is counted and reported but left to the signed-zero test.
template <class T>
TensorCheck check_tensor(Ref ref, const std::string& tensor, const ConfigData& cd, const Probe& probe,
                         const std::vector<T>& torch_v, const std::vector<T>& mhc_v, bool zero_signs) {
  TensorCheck tc;
  tc.label = cd.config.name + " " + ref_name(ref) + "." + tensor;
  tc.elements = int64_t(torch_v.size());
  tc.mism = count_mismatches(torch_v, mhc_v);
  tc.bit_exact_required = requires_bit_equality(ref, tensor, cd.config, probe.bmm);
  const auto dims = dims_of(tensor, cd.config.shape);
  if (tc.bit_exact_required) {
    const int64_t counted = zero_signs ? tc.mism.count : tc.mism.count - tc.mism.zero_sign;
    const int64_t first = std::max<int64_t>(zero_signs ? tc.mism.first : tc.mism.first_value, 0);
    EXPECT_EQ(counted, 0) << tc.label << " (probe: " << probe.bmm << "): " << counted << " of " << tc.elements
                          << " elements differ from PyTorch, max " << tc.mism.max_ulp << " ulp; first at "
                          << index_string(dims, first) << ": torch " << show(torch_v[first]) << ", mhcdiff "
                          << show(mhc_v[first]);
    return tc;
  }
  // Not defined exactly by PyTorch: both must lie within the rounding-error bound of the exact value. Where
  // the bmm accumulates in bf16 (or the probe cannot tell), the wider bf16-accumulation bound applies.
  const std::string& bmm_probe = tensor == "grad_comb" ? probe.bmm_over_d : probe.bmm;
  const bool bf16_bmm = bmm_probe.find("fp32") == std::string::npos;
  int64_t violations = 0;
  for (int64_t i = 0; i < tc.elements; ++i) {
    const TruthBound tb = truth_bound(ref, tensor, cd.inputs, i, bf16_bmm);
    if (!std::isfinite(tb.bound)) {
      ++tc.unbounded;  // PyTorch's bf16-accumulating bmm over >= 256 terms; refs/torch_refs.py's probe
      continue;        // checked that kernel's exact order instead
    }
    const double et = std::fabs(value_of(torch_v[i]) - tb.truth) / tb.bound;
    const double em = std::fabs(value_of(mhc_v[i]) - tb.truth) / tb.bound;
    tc.worst_torch = std::max(tc.worst_torch, et);
    tc.worst_mhc = std::max(tc.worst_mhc, em);
    if ((et > 1 || em > 1) && violations++ == 0)
      ADD_FAILURE() << tc.label << ": outside the rounding-error bound at " << index_string(dims, i) << ": exact "
                    << tb.truth << ", bound " << tb.bound << ", torch " << show(torch_v[i]) << ", mhcdiff "
                    << show(mhc_v[i]);
  }
  EXPECT_EQ(violations, 0) << tc.label << ": " << violations << " elements outside the error bound";
  return tc;
}

void print_summary(const std::vector<TensorCheck>& checks) {
  for (const TensorCheck& c : checks) {
    std::cout << "  " << std::left << std::setw(34) << c.label << (c.bit_exact_required ? " bit-exact " : " bounded   ")
              << c.mism.count << "/" << c.elements << " differ";
    if (c.mism.count) std::cout << " (max " << c.mism.max_ulp << " ulp)";
    if (c.mism.zero_sign) std::cout << ", " << c.mism.zero_sign << " only in the sign of zero";
    if (!c.bit_exact_required)
      std::cout << std::setprecision(3) << "; |err|/bound torch " << c.worst_torch << ", mhcdiff " << c.worst_mhc;
    if (c.unbounded) std::cout << "; " << c.unbounded << " without a finite bound (bf16 accumulator)";
    std::cout << "\n";
  }
}

// Compares one reference with one mhcdiff policy over every configuration but the signed-zero one, or
// over that one alone, where the signs of zeros count.
void check_reference(Ref ref, const std::string& policy, bool signed_zero_config = false) {
  const bool zero_signs = signed_zero_config;
  const ReferenceRun& run = torch_run();
  if (!run.skip_reason.empty()) GTEST_SKIP() << run.skip_reason;
  ASSERT_TRUE(run.error.empty()) << run.error;
  std::cout << run.env;
  const PolicyDesc pd = find_policy(policy).desc;
  std::vector<TensorCheck> checks;
  for (const ConfigData& cd : run.data) {
    if (cd.config.signed_zeros != signed_zero_config || cd.config.overflow) continue;
    const Shape& sh = cd.config.shape;
    const Probe probe = probe_of(run, cd.config);
    const PolicyResult res = run_policy_cpu(pd, cd.inputs.view(), true);
    const std::string base = (run.dir / (cd.config.name + "." + ref_name(ref) + ".")).string();
    const size_t shd = size_t(sh.S) * sh.H * sh.D;
    if (ref == Ref::fp64) {
      auto f64 = [&](const std::string& tensor, size_t n, const std::vector<double>& mhc) {
        checks.push_back(check_tensor(ref, tensor, cd, probe, read_raw<double>(base + tensor, n), mhc, zero_signs));
      };
      f64("out_f64", shd, res.out_f64);
      f64("grad_x_f64", size_t(sh.S) * sh.D, res.grad_x_f64);
      f64("grad_residual_f64", shd, res.grad_residual_f64);
      f64("grad_post_f64", size_t(sh.S) * sh.H, res.grad_post_f64);
      f64("grad_comb_f64", size_t(sh.S) * sh.H * sh.H, res.grad_comb_f64);
      continue;
    }
    checks.push_back(check_tensor(ref, "out", cd, probe, read_raw<uint16_t>(base + "out", shd), res.out, zero_signs));
    checks.push_back(check_tensor(ref, "grad_x", cd, probe, read_raw<uint16_t>(base + "grad_x", size_t(sh.S) * sh.D),
                                  res.grad_x, zero_signs));
    checks.push_back(
        check_tensor(ref, "grad_residual", cd, probe, read_raw<uint16_t>(base + "grad_residual", shd), res.grad_residual, zero_signs));
    checks.push_back(check_tensor(ref, "grad_post", cd, probe,
                                  read_raw<float>(base + "grad_post", size_t(sh.S) * sh.H), res.grad_post, zero_signs));
    checks.push_back(check_tensor(ref, "grad_comb", cd, probe,
                                  read_raw<float>(base + "grad_comb", size_t(sh.S) * sh.H * sh.H), res.grad_comb, zero_signs));
    std::cout << cd.config.name << " S=" << sh.S << " H=" << sh.H << " D=" << sh.D << ": hf bmm " << probe.bmm
              << ", over D " << probe.bmm_over_d << "\n";
  }
  print_summary(checks);
}

// The exact policy equals Python's correctly rounded math.fsum of the same exact products, bit for bit,
// for every stored tensor: RN64 copies and the bf16/fp32 values rounded once from the exact sum.
TEST(ExactRefs, ExactPolicyMatchesMathFsum) {
  const ReferenceRun& run = fsum_run();
  if (!run.skip_reason.empty()) GTEST_SKIP() << run.skip_reason;
  ASSERT_TRUE(run.error.empty()) << run.error;
  const PolicyDesc pd = find_policy("exact").desc;
  for (const ConfigData& cd : run.data) {
    if (cd.config.signed_zeros) continue;  // fsum's sign for a sum of -0 terms is not IEEE's (-0) before Python 3.12
    const Shape& sh = cd.config.shape;
    const PolicyResult res = run_policy_cpu(pd, cd.inputs.view(), true);
    const std::string base = (run.dir / (cd.config.name + ".exact.")).string();
    auto expect_equal = [&](const std::string& tensor, const auto& ref, const auto& mhc) {
      const Mismatches m = count_mismatches(ref, mhc);
      const auto dims = dims_of(tensor, sh);
      EXPECT_EQ(m.count, 0) << cd.config.name << " exact." << tensor << ": " << m.count << " of " << ref.size()
                            << " differ from math.fsum, max " << m.max_ulp << " ulp; first at "
                            << index_string(dims, m.first) << ": fsum " << show(ref[std::max<int64_t>(m.first, 0)])
                            << ", mhcdiff " << show(mhc[std::max<int64_t>(m.first, 0)]);
    };
    const size_t shd = size_t(sh.S) * sh.H * sh.D, sd = size_t(sh.S) * sh.D, sh1 = size_t(sh.S) * sh.H;
    const size_t shh = sh1 * sh.H;
    expect_equal("out", read_raw<uint16_t>(base + "out", shd), res.out);
    expect_equal("out_f64", read_raw<double>(base + "out_f64", shd), res.out_f64);
    expect_equal("grad_x", read_raw<uint16_t>(base + "grad_x", sd), res.grad_x);
    expect_equal("grad_x_f64", read_raw<double>(base + "grad_x_f64", sd), res.grad_x_f64);
    expect_equal("grad_residual", read_raw<uint16_t>(base + "grad_residual", shd), res.grad_residual);
    expect_equal("grad_residual_f64", read_raw<double>(base + "grad_residual_f64", shd), res.grad_residual_f64);
    expect_equal("grad_post", read_raw<float>(base + "grad_post", sh1), res.grad_post);
    expect_equal("grad_post_f64", read_raw<double>(base + "grad_post_f64", sh1), res.grad_post_f64);
    expect_equal("grad_comb", read_raw<float>(base + "grad_comb", shh), res.grad_comb);
    expect_equal("grad_comb_f64", read_raw<double>(base + "grad_comb_f64", shh), res.grad_comb_f64);
  }
}

TEST(TorchRefs, HfEagerExpressionMatchesHfBf16) { check_reference(Ref::hf, "hf-bf16"); }

TEST(TorchRefs, DeepSeekFp32ReferenceMatchesFp32Mixfirst) { check_reference(Ref::deepseek, "fp32-mixfirst"); }

TEST(TorchRefs, SeededFp32LoopMatchesFp32Seeded) { check_reference(Ref::seeded, "fp32-seeded"); }

TEST(TorchRefs, Float64SeededLoopMatchesFp64) { check_reference(Ref::fp64, "fp64"); }

// Every product is -0 here. PyTorch's reductions (bmm, torch.sum, autograd's sums over broadcast axes)
// start from +0, so -0 + -0 sums come out +0; mhcdiff's zero-initialised sums (zero_accumulator) must too,
// or the signs of zero results differ (0 ulp, but a bitwise mismatch, SPEC §5).
TEST(TorchRefs, SignedZeroSumsMatchPyTorch) {
  check_reference(Ref::hf, "hf-bf16", true);
  check_reference(Ref::deepseek, "fp32-mixfirst", true);
  check_reference(Ref::seeded, "fp32-seeded", true);
}

}  // namespace
}  // namespace mhc
