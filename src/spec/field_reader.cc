#include "spec/field_reader.h"

#include <exception>

#include "spec/yaml_document.h"

namespace bulwark::spec_internal {

Status FieldReader::ParseDocument(const std::string& text, const std::string& root_fix,
                                  const std::function<void(const YAML::Node&)>& parse) {
  auto doc = LoadSingleDocument(text, source_);
  if (!doc.ok()) return doc.status();
  try {
    if (!doc->IsMap()) {
      r_.Error(1, "", "the config must be a YAML mapping", SpecReader::Describe(*doc), root_fix);
    } else {
      parse(*doc);
    }
  } catch (const std::exception& ex) {
    r_.Error(1, "", std::string("malformed YAML tree: ") + ex.what(), "an exception",
             "check the document structure");
  }
  if (!r_.has_errors()) return Status::Ok();
  std::string msg;
  for (const std::string& line : r_.SortedErrors()) {
    if (!msg.empty()) msg += "\n";
    msg += line;
  }
  return InvalidArgument(msg);
}

bool FieldReader::Num(Fields& f, const char* key, double lo, bool excl, double hi, double* out,
                      double scale) {
  auto it = f.find(key);
  if (it == f.end()) return false;
  double v = 0;
  if (!r_.ReadNumber(it->second, lo, excl, hi, &v)) return false;
  *out = v * scale;
  return true;
}

bool FieldReader::Int(Fields& f, const char* key, long lo, long hi, int* out) {
  auto it = f.find(key);
  if (it == f.end()) return false;
  long v = 0;
  if (!r_.ReadInt(it->second, lo, hi, &v)) return false;
  *out = static_cast<int>(v);
  return true;
}

bool FieldReader::Str(Fields& f, const char* key, std::string* out) {
  auto it = f.find(key);
  if (it == f.end()) return false;
  std::string s;
  if (!r_.ReadString(it->second, &s)) return false;
  if (s.empty()) {
    r_.Error(it->second.line, it->second.path, "must not be empty", "\"\"", it->second.hint);
    return false;
  }
  *out = s;
  return true;
}

bool FieldReader::Bool(Fields& f, const char* key, bool* out) {
  auto it = f.find(key);
  if (it == f.end()) return false;
  const Entry& e = it->second;
  const std::string s = e.value.IsScalar() ? e.value.Scalar() : "";
  if (s == "true" || s == "false") {
    *out = s == "true";
    return true;
  }
  r_.Error(e.line, e.path, "must be true or false", SpecReader::Describe(e.value), e.hint);
  return false;
}

bool FieldReader::IsAuto(Fields& f, const char* key) {
  auto it = f.find(key);
  return it != f.end() && it->second.value.IsScalar() && it->second.value.Scalar() == "auto";
}

bool FieldReader::ReadList(const Entry& e, std::vector<YAML::Node>* items) {
  items->clear();
  if (e.value.IsNull()) return true;
  if (!e.value.IsSequence()) {
    r_.Error(e.line, e.path, "must be a list", SpecReader::Describe(e.value), e.hint);
    return false;
  }
  for (const YAML::Node& n : e.value) items->push_back(n);
  return true;
}

std::string FieldReader::Item(const std::string& path, size_t i) {
  return path + "[" + std::to_string(i) + "]";
}

Entry FieldReader::Sub(const YAML::Node& n, int line, const std::string& path,
                       const std::string& hint) {
  Entry e;
  e.value = n;
  e.line = SpecReader::LineOf(n, line);
  e.path = path;
  e.hint = hint;
  return e;
}

}  // namespace bulwark::spec_internal
