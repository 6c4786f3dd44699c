#pragma once
// Where an element sits in its tensor, in the operator's own axes (SPEC §5): (s,h,d) for out and
// grad_residual [S,H,D], (s,d) for grad_x [S,D], (s,h) for grad_post [S,H], (s,src,dst) for grad_comb.
// Leading batch dims are flattened into s, as everywhere else in mhcdiff.
#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace mhc::metrics {

struct ElementIndex {
  std::array<int64_t, 3> axes{};
  int rank = 1;

  std::string to_string() const;  // "(12, 3, 1007)"
  friend bool operator==(const ElementIndex&, const ElementIndex&) = default;
};

// The axes of a tensor: rows (s) and the trailing element dims of its kind.
struct IndexLayout {
  std::vector<int64_t> trailing;  // e.g. {H, D} for out; empty for a 1-D tensor
  std::vector<std::string> axis_names;  // e.g. {"s", "h", "d"}

  ElementIndex at(int64_t flat) const;
};

// The layout of one of mhcdiff's tensors (out, out_f64, grad_x, ...) given its stored dims: how many trailing
// dims belong to one token and what the axes are called. Throws std::invalid_argument for an unknown name or
// too few dims (callers turn that into an InputError naming the file).
IndexLayout layout_for(const std::string& tensor, const std::vector<int64_t>& dims);

}  // namespace mhc::metrics
