#include "spec/yaml_document.h"

#include <yaml-cpp/eventhandler.h>

#include <cstdio>
#include <new>
#include <set>
#include <sstream>
#include <string_view>
#include <vector>

#include "spec/spec_reader.h"

namespace bulwark::spec_internal {
namespace {

std::string SyntaxError(const std::string& source, const YAML::Mark& mark, const std::string& msg) {
  const int line = mark.line >= 0 ? mark.line + 1 : 1;
  const int col = mark.column >= 0 ? mark.column + 1 : 1;
  // OneLine: yaml-cpp copies bytes of the input into its message (e.g. "unknown escape
  // character: <the byte>").
  return source + ":" + std::to_string(line) + ": (yaml syntax): " + OneLine(msg) +
         " (got invalid YAML at column " + std::to_string(col) +
         "); fix the YAML syntax there (check indentation, quotes, brackets and the space "
         "after ':')";
}

// Records where each document starts; everything else is ignored.
class DocumentStarts : public YAML::EventHandler {
 public:
  std::vector<YAML::Mark> starts;
  void OnDocumentStart(const YAML::Mark& m) override { starts.push_back(m); }
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark&, YAML::anchor_t) override {}
  void OnAlias(const YAML::Mark&, YAML::anchor_t) override {}
  void OnScalar(const YAML::Mark&, const std::string&, YAML::anchor_t,
                const std::string&) override {}
  void OnSequenceStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                       YAML::EmitterStyle::value) override {}
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                  YAML::EmitterStyle::value) override {}
  void OnMapEnd() override {}
};

// Syntax-checks the whole stream without building nodes and counts documents.
// yaml-cpp 0.7 neither rejects nor consumes a stray flow indicator such as ','
// in block context: it reports endless empty documents at the same position (and
// YAML::LoadAll then allocates until OOM). A document that starts where the
// previous one started is therefore reported as a syntax error here, and the
// document loop is capped. Throws YAML::Exception on other syntax errors.
Status ScanDocuments(const std::string& text, const std::string& source, int* count,
                     int* second_line) {
  std::istringstream in(text);
  YAML::Parser parser(in);
  DocumentStarts h;
  for (int i = 0; i < 3 && parser.HandleNextDocument(h); ++i) {
    const size_t n = h.starts.size();
    if (n >= 2 && h.starts[n - 1].pos == h.starts[n - 2].pos) {
      const YAML::Mark& m = h.starts[n - 1];
      std::string what = "unexpected character";
      if (m.pos >= 0 && static_cast<size_t>(m.pos) < text.size()) {
        what += std::string(" '") + text[static_cast<size_t>(m.pos)] + "'";
      }
      return InvalidArgument(SyntaxError(source, m, what));
    }
  }
  *count = static_cast<int>(h.starts.size());
  *second_line = h.starts.size() >= 2 && h.starts[1].line >= 0 ? h.starts[1].line + 1 : 1;
  return Status::Ok();
}

// Length of the valid UTF-8 sequence at text[i], or 0 if it is not one (overlong
// forms, surrogates and code points above U+10FFFF are invalid).
size_t Utf8SequenceAt(const std::string& text, size_t i) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(text[k]); };
  const unsigned char c = b(i);
  if (c < 0x80) return 1;
  size_t n;
  unsigned char lo = 0x80, hi = 0xBF;  // bounds of the second byte
  if (c >= 0xC2 && c <= 0xDF) {
    n = 2;
  } else if (c >= 0xE0 && c <= 0xEF) {
    n = 3;
    if (c == 0xE0) lo = 0xA0;
    if (c == 0xED) hi = 0x9F;
  } else if (c >= 0xF0 && c <= 0xF4) {
    n = 4;
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F;
  } else {
    return 0;
  }
  if (i + n > text.size()) return 0;
  if (b(i + 1) < lo || b(i + 1) > hi) return 0;
  for (size_t k = 2; k < n; ++k) {
    if (b(i + k) < 0x80 || b(i + k) > 0xBF) return 0;
  }
  return n;
}

}  // namespace

Status CheckUtf8(const std::string& text, const std::string& source) {
  int line = 1;
  size_t line_start = 0;
  for (size_t i = 0; i < text.size();) {
    const size_t n = Utf8SequenceAt(text, i);
    if (n == 0) {
      char byte[8];
      std::snprintf(byte, sizeof byte, "0x%02x", static_cast<unsigned char>(text[i]));
      return InvalidArgument(source + ":" + std::to_string(line) + ": (encoding): byte " + byte +
                             " at column " + std::to_string(i - line_start + 1) +
                             " is not valid UTF-8; save the file as UTF-8 text (YAML, JSON "
                             "and Kubernetes manifests are UTF-8), or write the character "
                             "as an escape in a double-quoted string (\"\\u00ff\")");
    }
    if (text[i] == '\n') {
      ++line;
      line_start = i + 1;
    }
    i += n;
  }
  return Status::Ok();
}

namespace {

// The first scalar (or key) under `n` whose decoded bytes are not UTF-8, as an error.
// yaml-cpp 0.7 decodes the escapes \N and \_ of a double-quoted string to single Latin-1
// bytes (0x85, 0xa0), so valid UTF-8 text can yield them. Aliased nodes share their mark:
// each is visited once, so an alias bomb costs its size, not its expansion.
Status CheckScalarsUtf8(const YAML::Node& n, const std::string& source, std::set<int>* seen,
                        int depth) {
  if (!n.IsDefined() || depth > 256) return Status::Ok();
  const int pos = n.Mark().pos;
  if (pos >= 0 && !seen->insert(pos).second) return Status::Ok();
  if (n.IsScalar()) {
    const std::string& s = n.Scalar();
    for (size_t i = 0; i < s.size();) {
      const size_t k = Utf8SequenceAt(s, i);
      if (k == 0) {
        return InvalidArgument(
            source + ":" + std::to_string(n.Mark().line + 1) +
            ": (encoding): this string decodes to bytes that are not UTF-8 (the YAML "
            "escapes \\N and \\_); write the character itself, or as \\u0085 or "
            "\\u00a0");
      }
      i += k;
    }
    return Status::Ok();
  }
  if (n.IsSequence()) {
    for (const YAML::Node& c : n) BW_RETURN_IF_ERROR(CheckScalarsUtf8(c, source, seen, depth + 1));
  } else if (n.IsMap()) {
    for (const auto& kv : n) {
      BW_RETURN_IF_ERROR(CheckScalarsUtf8(kv.first, source, seen, depth + 1));
      BW_RETURN_IF_ERROR(CheckScalarsUtf8(kv.second, source, seen, depth + 1));
    }
  }
  return Status::Ok();
}

}  // namespace

Status CheckDecodedUtf8(const YAML::Node& root, const std::string& source) {
  std::set<int> seen;
  return CheckScalarsUtf8(root, source, &seen, 0);
}

Result<YAML::Node> LoadSingleDocument(const std::string& text, const std::string& source) {
  BW_RETURN_IF_ERROR(CheckUtf8(text, source));
  try {
    int count = 0, second_line = 1;
    BW_RETURN_IF_ERROR(ScanDocuments(text, source, &count, &second_line));
    if (count > 1) {
      return InvalidArgument(source + ":" + std::to_string(second_line) +
                             ": (top level): the spec must be a single YAML document (got more "
                             "than one document); remove the extra '---' documents or split "
                             "them into separate files");
    }
    if (count == 0) return YAML::Node(YAML::NodeType::Null);
    YAML::Node root = YAML::Load(text);
    // Only an escape of a double-quoted string (\N, \_) decodes UTF-8 text to other
    // bytes; NUL-free UTF-8 text is read as UTF-8 (yaml-cpp guesses UTF-16/32 only
    // from NUL bytes or a BOM, which CheckUtf8 refused). Text without either needs no
    // second pass.
    if (text.find_first_of(std::string_view("\\\0", 2)) != std::string::npos) {
      BW_RETURN_IF_ERROR(CheckDecodedUtf8(root, source));
    }
    return root;
  } catch (const YAML::Exception& e) {
    return InvalidArgument(SyntaxError(source, e.mark, e.msg));
  } catch (const std::bad_alloc&) {
    return InvalidArgument(source +
                           ":1: (yaml syntax): the YAML parser ran out of memory (got "
                           "malformed or huge input); fix the YAML syntax");
  }
}

}  // namespace bulwark::spec_internal
