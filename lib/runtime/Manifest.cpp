//===- Manifest.cpp - Launch manifests ------------------------------------===//

#include "Arch.h"
#include "ReadFile.h"
#include "tilec/runtime/Runtime.h"

#include <filesystem>
#include <limits>
#include <set>

namespace tilec::runtime {

const char *toString(ParamKind kind) {
  switch (kind) {
  case ParamKind::Ptr:
    return "ptr";
  case ParamKind::I32:
    return "i32";
  case ParamKind::I64:
    return "i64";
  case ParamKind::F32:
    return "f32";
  }
  return "?";
}

const char *toString(ElemType elem) {
  switch (elem) {
  case ElemType::F16:
    return "f16";
  case ElemType::BF16:
    return "bf16";
  case ElemType::F32:
    return "f32";
  case ElemType::I32:
    return "i32";
  case ElemType::I64:
    return "i64";
  }
  return "?";
}

namespace {

/// Validates one manifest document; every error names the manifest and the
/// key path ("params[3].kind") of the offending value.
class ManifestReader {
public:
  explicit ManifestReader(const std::string &path) : path_(path) {}

  Manifest read(std::string_view text) {
    Manifest m;
    m.path = path_;
    m.json = parseJson(text, path_);
    if (!m.json.isObject())
      fail("the document", "must be a JSON object");
    const JsonValue &doc = m.json;

    m.kernel = requireString(doc, "kernel");
    if (m.kernel.empty())
      fail("kernel", "must not be empty");
    if (const JsonValue *arch = doc.find("arch"))
      m.arch = expectString(*arch, "arch");
    m.cubinPath = optionalFile(doc, "cubin");
    m.ptxPath = optionalFile(doc, "ptx");
    if (m.cubinPath.empty() && m.ptxPath.empty())
      fail("the document", "names neither a \"cubin\" nor a \"ptx\" file");
    if (const JsonValue *sass = doc.find("sass")) {
      if (!sass->isArray())
        fail("sass", std::string("must be an array, got ") +
                         JsonValue::typeName(sass->type()));
      for (size_t i = 0; i < sass->asArray().size(); ++i) {
        std::string key = "sass[" + std::to_string(i) + "]";
        const JsonValue &entry = sass->asArray()[i];
        const JsonValue *arch = entry.isObject() ? entry.find("arch") : nullptr;
        const JsonValue *cubin = entry.isObject() ? entry.find("cubin") : nullptr;
        if (!arch || !cubin)
          fail(key, "must be an object with \"arch\" and \"cubin\"");
        Manifest::Sass image;
        image.arch = expectString(*arch, key + ".arch");
        image.cubinPath = resolve(expectString(*cubin, key + ".cubin"), key + ".cubin");
        detail::SmArch parsed;
        if (!detail::parseSmArch(image.arch, parsed))
          fail(key + ".arch", "must name a GPU like \"sm_90\", got \"" + image.arch + "\"");
        if (image.arch == m.arch)
          fail(key + ".arch", "is the main cubin's arch \"" + m.arch + "\"");
        for (const Manifest::Sass &earlier : m.sass)
          if (earlier.arch == image.arch)
            fail(key + ".arch", "\"" + image.arch + "\" is listed twice");
        m.sass.push_back(std::move(image));
      }
    }

    const JsonValue &block = require(doc, "block");
    expectArray(block, "block", 3);
    int64_t threads = 1;
    for (size_t i = 0; i < 3; ++i) {
      std::string key = "block[" + std::to_string(i) + "]";
      m.block[i] = static_cast<uint32_t>(
          expectInteger(block.asArray()[i], key, 1, 1024));
      threads *= m.block[i];
    }
    if (threads > 1024)
      fail("block", "has " + std::to_string(threads) +
                        " threads; CUDA allows at most 1024 per block");

    if (const JsonValue *smem = doc.find("shared_bytes"))
      m.sharedBytes = static_cast<uint32_t>(expectInteger(
          *smem, "shared_bytes", 0, std::numeric_limits<uint32_t>::max()));

    if (const JsonValue *early = doc.find("programmatic_launch")) {
      if (!early->isBool())
        fail("programmatic_launch", std::string("must be a bool, got ") +
                                        JsonValue::typeName(early->type()));
      m.programmaticLaunch = early->asBool();
    }

    readParams(require(doc, "params"), m);
    readGrid(require(doc, "grid"), m);
    return m;
  }

private:
  [[noreturn]] void fail(const std::string &where,
                         const std::string &what) const {
    throw Error(Error::Kind::Manifest,
                "manifest " + path_ + ": " + where + " " + what);
  }

  const JsonValue &require(const JsonValue &obj, const std::string &key) {
    const JsonValue *v = obj.find(key);
    if (!v)
      fail("the document", "lacks the required key \"" + key + "\"");
    return *v;
  }

  std::string requireString(const JsonValue &obj, const std::string &key) {
    return expectString(require(obj, key), key);
  }

  std::string expectString(const JsonValue &v, const std::string &key) {
    if (!v.isString())
      fail(key, std::string("must be a string, got ") +
                    JsonValue::typeName(v.type()));
    return v.asString();
  }

  int64_t expectInteger(const JsonValue &v, const std::string &key,
                        int64_t min, int64_t max) {
    if (!v.isInteger())
      fail(key, std::string("must be an integer, got ") +
                    JsonValue::typeName(v.type()));
    int64_t i = v.asInteger();
    if (i < min || i > max)
      fail(key, "= " + std::to_string(i) + " is outside [" +
                    std::to_string(min) + ", " + std::to_string(max) + "]");
    return i;
  }

  void expectArray(const JsonValue &v, const std::string &key, size_t size) {
    if (!v.isArray())
      fail(key, std::string("must be an array, got ") +
                    JsonValue::typeName(v.type()));
    if (v.asArray().size() != size)
      fail(key, "must have " + std::to_string(size) + " entries, got " +
                    std::to_string(v.asArray().size()));
  }

  /// The file named by `key`, resolved against the manifest's folder, or ""
  /// when the key is absent.
  std::string optionalFile(const JsonValue &doc, const std::string &key) {
    const JsonValue *v = doc.find(key);
    if (!v)
      return "";
    return resolve(expectString(*v, key), key);
  }

  /// A file name relative to the manifest's folder (or absolute).
  std::string resolve(const std::string &name, const std::string &key) {
    if (name.empty())
      fail(key, "must not be empty");
    std::filesystem::path p(name);
    if (p.is_relative())
      p = std::filesystem::path(path_).parent_path() / p;
    return p.string();
  }

  void readParams(const JsonValue &params, Manifest &m) {
    if (!params.isArray())
      fail("params", std::string("must be an array, got ") +
                         JsonValue::typeName(params.type()));
    std::set<std::string> seen;
    for (size_t i = 0; i < params.asArray().size(); ++i) {
      const JsonValue &pv = params.asArray()[i];
      std::string key = "params[" + std::to_string(i) + "]";
      if (!pv.isObject())
        fail(key, std::string("must be an object, got ") +
                      JsonValue::typeName(pv.type()));
      Param p;
      p.name = requireMember(pv, key, "name");
      if (p.name.empty())
        fail(key + ".name", "must not be empty");
      if (!seen.insert(p.name).second)
        fail(key + ".name", "\"" + p.name + "\" is used by an earlier param");
      std::string kind = requireMember(pv, key, "kind");
      if (kind == "ptr")
        p.kind = ParamKind::Ptr;
      else if (kind == "i32")
        p.kind = ParamKind::I32;
      else if (kind == "i64")
        p.kind = ParamKind::I64;
      else if (kind == "f32")
        p.kind = ParamKind::F32;
      else
        fail(key + ".kind",
             "must be one of ptr, i32, i64, f32, got \"" + kind + "\"");
      const JsonValue *elem = pv.find("elem");
      if (p.kind == ParamKind::Ptr) {
        if (!elem)
          fail(key, "(" + p.name + ") is a ptr but has no \"elem\"");
        std::string e = expectString(*elem, key + ".elem");
        if (e == "f16")
          p.elem = ElemType::F16;
        else if (e == "bf16")
          p.elem = ElemType::BF16;
        else if (e == "f32")
          p.elem = ElemType::F32;
        else if (e == "i32")
          p.elem = ElemType::I32;
        else if (e == "i64")
          p.elem = ElemType::I64;
        else
          fail(key + ".elem",
               "must be one of f16, bf16, f32, i32, i64, got \"" + e + "\"");
      } else if (elem) {
        fail(key, "(" + p.name + ") has \"elem\" but is not a ptr");
      }
      if (const JsonValue *positive = pv.find("positive")) {
        if (!positive->isBool())
          fail(key + ".positive", std::string("must be a bool, got ") +
                                      JsonValue::typeName(positive->type()));
        p.positive = positive->asBool();
        if (p.positive && p.kind == ParamKind::Ptr)
          fail(key, "(" + p.name + ") is a ptr and cannot be \"positive\"");
      }
      if (const JsonValue *align = pv.find("align")) {
        int64_t bytes = expectInteger(*align, key + ".align", 1, 1 << 20);
        if (p.kind != ParamKind::Ptr || (bytes & (bytes - 1)) != 0)
          fail(key + ".align", "must be a power-of-two byte count on a ptr");
        p.align = bytes;
      }
      m.params.push_back(std::move(p));
    }
  }

  std::string requireMember(const JsonValue &obj, const std::string &objKey,
                            const std::string &key) {
    const JsonValue *v = obj.find(key);
    if (!v)
      fail(objKey, "lacks the required key \"" + key + "\"");
    return expectString(*v, objKey + "." + key);
  }

  void readGrid(const JsonValue &grid, Manifest &m) {
    expectArray(grid, "grid", 3);
    std::vector<std::string> names;
    for (size_t i = 0; i < m.params.size(); ++i) {
      ParamKind k = m.params[i].kind;
      if (k == ParamKind::I32 || k == ParamKind::I64) {
        names.push_back(m.params[i].name);
        m.gridParams.push_back(i);
      }
    }
    for (size_t i = 0; i < 3; ++i) {
      const JsonValue &g = grid.asArray()[i];
      std::string key = "grid[" + std::to_string(i) + "]";
      std::string source;
      if (g.isInteger())
        source = std::to_string(g.asInteger());
      else if (g.isString())
        source = g.asString();
      else
        fail(key, std::string("must be a string or an integer, got ") +
                      JsonValue::typeName(g.type()));
      m.grid[i] = GridExpr::parse(source, names, "manifest " + path_ + ": " + key);
    }
  }

  const std::string &path_;
};

} // namespace

Manifest parseManifest(std::string_view text, const std::string &path) {
  return ManifestReader(path).read(text);
}

Manifest loadManifest(const std::string &path) {
  std::string text, error;
  if (!detail::readFile(path, text, error))
    throw Error(Error::Kind::Manifest,
                "manifest " + path + ": cannot read: " + error);
  return parseManifest(text, path);
}

} // namespace tilec::runtime
