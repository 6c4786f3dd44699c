#include "metrics/element_index.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <stdexcept>

namespace mhc::metrics {

std::string ElementIndex::to_string() const {
  std::string s = "(";
  for (int i = 0; i < rank; ++i) s += (i ? ", " : "") + std::to_string(axes[i]);
  return s + ")";
}

ElementIndex IndexLayout::at(int64_t flat) const {
  ElementIndex idx;
  idx.rank = 1 + static_cast<int>(trailing.size());
  for (int i = static_cast<int>(trailing.size()) - 1; i >= 0; --i) {
    idx.axes[i + 1] = flat % trailing[i];
    flat /= trailing[i];
  }
  idx.axes[0] = flat;
  return idx;
}

IndexLayout layout_for(const std::string& tensor, const std::vector<int64_t>& dims) {
  std::string base = tensor;
  if (base.size() > 4 && base.compare(base.size() - 4, 4, "_f64") == 0) base.resize(base.size() - 4);
  IndexLayout l;
  if (base == "out" || base == "grad_residual") l.axis_names = {"s", "h", "d"};
  else if (base == "grad_x") l.axis_names = {"s", "d"};
  else if (base == "grad_post") l.axis_names = {"s", "h"};
  else if (base == "grad_comb") l.axis_names = {"s", "src", "dst"};
  else throw std::invalid_argument(fmt::format("'{}' is not a tensor mhcdiff compares (out, grad_x, grad_residual, "
                                               "grad_post, grad_comb, or one of them with _f64)", tensor));
  const size_t trailing = l.axis_names.size() - 1;
  if (dims.size() < trailing + 1)
    throw std::invalid_argument(fmt::format("'{}' has {} dims but needs at least {} ({})", tensor, dims.size(),
                                            trailing + 1, fmt::join(l.axis_names, ",")));
  l.trailing.assign(dims.end() - static_cast<std::ptrdiff_t>(trailing), dims.end());
  return l;
}

}  // namespace mhc::metrics
