#include "trainjob/manifest_input.h"

#include <unistd.h>

#include <cerrno>
#include <filesystem>

#include "spec/job_fields.h"
#include "spec/job_spec_schema.h"
#include "trainjob/trainjob_internal.h"

namespace bulwark::trainjob {
namespace {

bool IsMarker(const std::string& text, size_t pos, const char* marker) {
  if (text.compare(pos, 3, marker) != 0) return false;
  const size_t after = pos + 3;
  return after >= text.size() || text[after] == '\n' || text[after] == '\r' || text[after] == ' ' ||
         text[after] == '\t';
}

// Whether `doc` holds anything but blank lines, comments and document markers.
bool HasContent(const std::string& doc) {
  size_t pos = 0;
  while (pos < doc.size()) {
    size_t end = doc.find('\n', pos);
    if (end == std::string::npos) end = doc.size();
    std::string line = doc.substr(pos, end - pos);
    if (IsMarker(line, 0, "---") || IsMarker(line, 0, "...")) line = line.substr(3);
    const size_t first = line.find_first_not_of(" \t\r");
    if (first != std::string::npos && line[first] != '#') return true;
    pos = end + 1;
  }
  return false;
}

}  // namespace

Result<ManifestInput> ReadManifestInput(const std::string& path) {
  ManifestInput in;
  std::error_code ec;
  if (path == "-") {
    in.name = "<stdin>";
    in.base_dir = std::filesystem::current_path(ec).string();
    if (ec) return InvalidArgument("standard input: the working directory: " + ec.message());
    char buf[64 * 1024];
    while (true) {
      const ssize_t n = ::read(STDIN_FILENO, buf, sizeof buf);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return ErrnoStatus("read standard input", errno);
      if (n == 0) break;
      in.text.append(buf, static_cast<size_t>(n));
      if (in.text.size() > spec_internal::kMaxSpecBytes) {
        return InvalidArgument(
            "<stdin>:1: (top level): input too large (got more than 1 MiB); a manifest "
            "should be a few KiB of YAML");
      }
    }
    return in;
  }
  const std::filesystem::path abs = std::filesystem::absolute(path, ec);
  if (ec) return InvalidArgument("manifest path " + path + ": " + ec.message());
  BW_ASSIGN_OR_RETURN(in.text, spec_internal::ReadSpecFile(path));
  in.name = path;
  in.base_dir = abs.parent_path().string();
  in.path = spec_internal::CleanPath(abs);
  return in;
}

std::vector<std::string> SplitYamlDocuments(const std::string& text) {
  std::vector<std::string> docs;
  std::string current;  // the document being collected, earlier lines blanked
  std::string blanks;   // one '\n' per line before `current` began
  bool in_doc = false;
  auto finish = [&] {
    if (in_doc && HasContent(current)) docs.push_back(current);
  };
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    const bool last = end == std::string::npos;
    if (last) end = text.size();
    const std::string line = text.substr(pos, end - pos + (last ? 0 : 1));
    if (IsMarker(text, pos, "---")) {
      finish();
      current = blanks + line;
      in_doc = true;
    } else if (IsMarker(text, pos, "...")) {
      if (!in_doc) current = blanks;  // "..." ending an implicit first document
      current += line;
      in_doc = true;
      finish();
      in_doc = false;
      current.clear();
    } else {
      if (!in_doc) {
        current = blanks;
        in_doc = true;
      }
      current += line;
    }
    blanks += '\n';
    pos = end + 1;
  }
  finish();
  return docs;
}

struct LoadedManifestInput::Documents {
  std::vector<Result<YAML::Node>> roots;  // one per document of the input, in order
};

LoadedManifestInput::LoadedManifestInput(const ManifestInput& in)
    : name_(in.name), base_dir_(in.base_dir), path_(in.path) {
  auto docs = std::make_shared<Documents>();
  for (const std::string& doc : SplitYamlDocuments(in.text)) {
    docs->roots.push_back(internal::LoadDocument(doc, in.name));
  }
  docs_ = std::move(docs);
}

Result<std::vector<LoadedManifest>> LoadedManifestInput::Parse(Target target) const {
  if (docs_->roots.empty()) {
    return InvalidArgument(name_ +
                           ":1: (top level): no manifest in it (empty, or only comments); give a "
                           "job spec (docs/job-spec.md), a TrainJob or a PyTorchJob");
  }
  std::vector<LoadedManifest> out;
  for (const Result<YAML::Node>& root : docs_->roots) {
    if (!root.ok()) return root.status();
    BW_ASSIGN_OR_RETURN(LoadedManifest m,
                        internal::ParseLoadedManifest(*root, name_, base_dir_, target));
    m.job.job.source_path = path_;
    out.push_back(std::move(m));
  }
  return out;
}

Result<std::vector<LoadedManifest>> ParseManifestInput(const ManifestInput& in, Target target) {
  return LoadedManifestInput(in).Parse(target);
}

}  // namespace bulwark::trainjob
