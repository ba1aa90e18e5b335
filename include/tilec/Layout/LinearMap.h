//===- LinearMap.h - linear maps over GF(2) between named index spaces ---===//
//
// The general form of a layout, after Triton's LinearLayout
// (include/triton/Tools/LinearLayout.h): named input dimensions (for a
// distributed tile: "register", "lane", "warp", "block"), each a power of two
// of values whose bits own basis vectors, and named output dimensions (tile
// coordinates "dim0", "dim1", ..., or a shared-memory "offset"), each a power
// of two. An input is mapped to the XOR of the bases of its set bits.
//
// What it adds over tilec::LinearLayout (the distributed layouts the passes
// attach to tiles, which converts to one with toMap()): any index spaces,
// composition (register -> coordinate -> shared offset is the address
// pattern of an access, so bank conflicts are a property of a composed map)
// and inversion (which register of which thread holds a coordinate; which
// coordinate lives at an offset). Shared-memory swizzles are linear maps too
// (tilec::sm80::swizzledShared), which is what wgmma's operand descriptors
// will need.
//
// Plain C++ on purpose, like LinearLayout: unit-tested without MLIR
// (test/unit/LinearMapTest.cpp).
//
//===----------------------------------------------------------------------===//
#ifndef TILEC_LAYOUT_LINEARMAP_H
#define TILEC_LAYOUT_LINEARMAP_H

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace tilec {

class LinearMap {
public:
  /// An input dimension: its name and one basis per bit (each basis has one
  /// value per output dimension); its size is 2^bases.size().
  struct InDim {
    std::string name;
    std::vector<std::vector<int64_t>> bases;
  };
  /// An output dimension: its name and size (a power of two).
  struct OutDim {
    std::string name;
    int64_t size;
  };

  LinearMap() = default;
  /// Asserts that every basis has one value per output dimension, inside
  /// that dimension's size, and that sizes are powers of two.
  LinearMap(std::vector<InDim> ins, std::vector<OutDim> outs);

  const std::vector<InDim> &ins() const { return ins_; }
  const std::vector<OutDim> &outs() const { return outs_; }
  int64_t inSize(const std::string &name) const;
  int64_t outSize(const std::string &name) const;
  int inBits() const;
  int outBits() const;

  /// The output of the input with these values (one per input dimension,
  /// in order).
  std::vector<int64_t> apply(const std::vector<int64_t> &in) const;

  /// `outer` after this map: this map's outputs must be `outer`'s inputs
  /// (same names, sizes and order). The result maps this map's inputs to
  /// `outer`'s outputs. std::nullopt when they do not line up.
  std::optional<LinearMap> compose(const LinearMap &outer) const;

  /// The inverse of a bijection (as many input as output bits, full rank):
  /// outputs become inputs and inputs outputs. std::nullopt when the map is
  /// not invertible (it replicates, or does not reach every output).
  std::optional<LinearMap> invert() const;

  /// True when no two inputs map to the same output (no zero combination of
  /// bases: rank = input bits).
  bool injective() const;

  bool operator==(const LinearMap &other) const;
  bool operator!=(const LinearMap &other) const { return !(*this == other); }
  std::string str() const;

private:
  // An output as one bit string: dimension d's bits sit above those of
  // dimensions before it.
  uint64_t pack(const std::vector<int64_t> &out) const;
  std::vector<int64_t> unpack(uint64_t bits) const;
  std::vector<uint64_t> packedBases() const; // every input bit's basis, in input order

  std::vector<InDim> ins_;
  std::vector<OutDim> outs_;
};

} // namespace tilec

#endif // TILEC_LAYOUT_LINEARMAP_H
