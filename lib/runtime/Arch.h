//===- Arch.h - GPU architecture names ("sm_90", "sm_90a") ---------------===//
#ifndef TILEC_LIB_RUNTIME_ARCH_H
#define TILEC_LIB_RUNTIME_ARCH_H

#include <string>

namespace tilec::runtime::detail {

/// A GPU architecture as ptxas -arch names it: "sm_80" (major 8, minor 0),
/// "sm_100", or "sm_90a" (arch-specific: runs only on that exact chip).
struct SmArch {
  int major = 0, minor = 0;
  bool specific = false;
};

/// Parses "sm_<major><minor>[a]"; false for anything else.
inline bool parseSmArch(const std::string &name, SmArch &out) {
  if (name.size() < 5 || name.compare(0, 3, "sm_") != 0)
    return false;
  std::string digits = name.substr(3);
  out.specific = digits.back() == 'a';
  if (out.specific)
    digits.pop_back();
  // At most four digits: std::stoi would throw (and end the process) on an
  // "sm_" with more digits than an int holds.
  if (digits.size() < 2 || digits.size() > 4 ||
      digits.find_first_not_of("0123456789") != std::string::npos)
    return false;
  out.major = std::stoi(digits.substr(0, digits.size() - 1));
  out.minor = digits.back() - '0';
  return true;
}

} // namespace tilec::runtime::detail

#endif
