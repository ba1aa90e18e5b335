//===- LinearMap.cpp - linear maps over GF(2) between named index spaces -===//
#include "tilec/Layout/LinearMap.h"

#include <cassert>
#include <sstream>

namespace tilec {

static int log2Of(int64_t v) {
  int bits = 0;
  while ((int64_t(1) << bits) < v)
    ++bits;
  return bits;
}

static bool isPow2(int64_t v) { return v > 0 && (v & (v - 1)) == 0; }

LinearMap::LinearMap(std::vector<InDim> ins, std::vector<OutDim> outs)
    : ins_(std::move(ins)), outs_(std::move(outs)) {
#ifndef NDEBUG
  int total = 0;
  for (const OutDim &o : outs_) {
    assert(isPow2(o.size) && "output sizes are powers of two");
    total += log2Of(o.size);
  }
  assert(total <= 64 && "at most 64 output bits");
  for (const InDim &in : ins_)
    for (const auto &basis : in.bases) {
      assert(basis.size() == outs_.size() && "one basis value per output dimension");
      for (size_t d = 0; d < basis.size(); ++d)
        assert(basis[d] >= 0 && basis[d] < outs_[d].size && "basis inside its output dimension");
    }
#endif
}

int64_t LinearMap::inSize(const std::string &name) const {
  for (const InDim &in : ins_)
    if (in.name == name)
      return int64_t(1) << in.bases.size();
  return 0;
}

int64_t LinearMap::outSize(const std::string &name) const {
  for (const OutDim &o : outs_)
    if (o.name == name)
      return o.size;
  return 0;
}

int LinearMap::inBits() const {
  int bits = 0;
  for (const InDim &in : ins_)
    bits += in.bases.size();
  return bits;
}

int LinearMap::outBits() const {
  int bits = 0;
  for (const OutDim &o : outs_)
    bits += log2Of(o.size);
  return bits;
}

uint64_t LinearMap::pack(const std::vector<int64_t> &out) const {
  uint64_t bits = 0;
  int shift = 0;
  for (size_t d = 0; d < outs_.size(); ++d) {
    bits |= uint64_t(out[d]) << shift;
    shift += log2Of(outs_[d].size);
  }
  return bits;
}

std::vector<int64_t> LinearMap::unpack(uint64_t bits) const {
  std::vector<int64_t> out(outs_.size());
  int shift = 0;
  for (size_t d = 0; d < outs_.size(); ++d) {
    int width = log2Of(outs_[d].size);
    out[d] = int64_t((bits >> shift) & ((uint64_t(1) << width) - 1));
    shift += width;
  }
  return out;
}

std::vector<uint64_t> LinearMap::packedBases() const {
  std::vector<uint64_t> bases;
  for (const InDim &in : ins_)
    for (const auto &basis : in.bases)
      bases.push_back(pack(basis));
  return bases;
}

std::vector<int64_t> LinearMap::apply(const std::vector<int64_t> &in) const {
  assert(in.size() == ins_.size() && "one value per input dimension");
  uint64_t out = 0;
  for (size_t i = 0; i < ins_.size(); ++i)
    for (size_t b = 0; b < ins_[i].bases.size(); ++b)
      if (in[i] & (int64_t(1) << b))
        out ^= pack(ins_[i].bases[b]);
  return unpack(out);
}

std::optional<LinearMap> LinearMap::compose(const LinearMap &outer) const {
  if (outer.ins_.size() != outs_.size())
    return std::nullopt;
  for (size_t d = 0; d < outs_.size(); ++d)
    if (outer.ins_[d].name != outs_[d].name ||
        (int64_t(1) << outer.ins_[d].bases.size()) != outs_[d].size)
      return std::nullopt;
  std::vector<InDim> ins;
  for (const InDim &in : ins_) {
    InDim mapped{in.name, {}};
    for (const auto &basis : in.bases)
      mapped.bases.push_back(outer.apply(basis));
    ins.push_back(std::move(mapped));
  }
  return LinearMap(std::move(ins), outer.outs_);
}

// Gaussian elimination over GF(2): the rank of a set of bit vectors.
static int rankOf(std::vector<uint64_t> rows) {
  int rank = 0;
  for (int bit = 63; bit >= 0; --bit) {
    uint64_t mask = uint64_t(1) << bit;
    size_t pivot = rank;
    while (pivot < rows.size() && !(rows[pivot] & mask))
      ++pivot;
    if (pivot == rows.size())
      continue;
    std::swap(rows[rank], rows[pivot]);
    for (size_t r = 0; r < rows.size(); ++r)
      if (r != size_t(rank) && (rows[r] & mask))
        rows[r] ^= rows[rank];
    ++rank;
  }
  return rank;
}

bool LinearMap::injective() const { return rankOf(packedBases()) == inBits(); }

std::optional<LinearMap> LinearMap::invert() const {
  int n = inBits();
  if (n != outBits() || !injective())
    return std::nullopt;
  // Solve for each output bit e_j the input bits x with sum x_i b_i = e_j:
  // eliminate on the augmented rows [basis_i | unit_i].
  std::vector<uint64_t> basis = packedBases(), which(n);
  for (int i = 0; i < n; ++i)
    which[i] = uint64_t(1) << i;
  for (int col = 0; col < n; ++col) {
    uint64_t mask = uint64_t(1) << col;
    int pivot = col;
    while (pivot < n && !(basis[pivot] & mask))
      ++pivot;
    assert(pivot < n && "full rank");
    std::swap(basis[col], basis[pivot]);
    std::swap(which[col], which[pivot]);
    for (int r = 0; r < n; ++r)
      if (r != col && (basis[r] & mask)) {
        basis[r] ^= basis[col];
        which[r] ^= which[col];
      }
  }
  // Now basis[j] = e_j and which[j] names the input bits that produce it.
  std::vector<OutDim> outs;
  for (const InDim &in : ins_)
    outs.push_back({in.name, int64_t(1) << in.bases.size()});
  LinearMap inputs({}, outs);
  std::vector<InDim> ins;
  int bit = 0;
  for (const OutDim &o : outs_) {
    InDim dim{o.name, {}};
    for (int b = 0; b < log2Of(o.size); ++b, ++bit)
      dim.bases.push_back(inputs.unpack(which[bit]));
    ins.push_back(std::move(dim));
  }
  return LinearMap(std::move(ins), std::move(outs));
}

bool LinearMap::operator==(const LinearMap &other) const {
  if (ins_.size() != other.ins_.size() || outs_.size() != other.outs_.size())
    return false;
  for (size_t i = 0; i < ins_.size(); ++i)
    if (ins_[i].name != other.ins_[i].name || ins_[i].bases != other.ins_[i].bases)
      return false;
  for (size_t d = 0; d < outs_.size(); ++d)
    if (outs_[d].name != other.outs_[d].name || outs_[d].size != other.outs_[d].size)
      return false;
  return true;
}

std::string LinearMap::str() const {
  std::ostringstream os;
  for (size_t i = 0; i < ins_.size(); ++i) {
    os << (i ? ", " : "") << ins_[i].name << " = [";
    for (size_t b = 0; b < ins_[i].bases.size(); ++b) {
      os << (b ? ", " : "") << "[";
      for (size_t d = 0; d < ins_[i].bases[b].size(); ++d)
        os << (d ? ", " : "") << ins_[i].bases[b][d];
      os << "]";
    }
    os << "]";
  }
  os << " -> (";
  for (size_t d = 0; d < outs_.size(); ++d)
    os << (d ? ", " : "") << outs_[d].name << ":" << outs_[d].size;
  os << ")";
  return os.str();
}

} // namespace tilec
