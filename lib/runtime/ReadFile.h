//===- ReadFile.h - Whole-file reads for manifests and images -------------===//
#ifndef TILEC_LIB_RUNTIME_READFILE_H
#define TILEC_LIB_RUNTIME_READFILE_H

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>

namespace tilec::runtime::detail {

/// Reads all of `path` into `out`; on failure returns false and sets `error`
/// to the system's reason.
inline bool readFile(const std::string &path, std::string &out,
                     std::string &error) {
  errno = 0;
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    error = errno ? std::strerror(errno) : "cannot open";
    return false;
  }
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) {
    error = "read error";
    return false;
  }
  out = ss.str();
  return true;
}

} // namespace tilec::runtime::detail

#endif // TILEC_LIB_RUNTIME_READFILE_H
