// Watch streams: line framing over arbitrary chunks, event decoding, Client::Watch.
//
// A watch response is a chunked JSON stream, one {"type", "object"} per line. Only
// complete lines are decoded and delivered; bytes of a line the stream never
// finished are discarded and the watch reports kUnavailable, so a consumer resumes
// from the resourceVersion of the last event it actually received.
#include "k8s/internal.h"

namespace bulwark::k8s {

namespace internal {

bool LineSplitter::Feed(std::string_view data,
                        const std::function<bool(std::string_view)>& on_line) {
  buf_.append(data.data(), data.size());
  size_t pos = 0;
  while (true) {
    size_t nl = buf_.find('\n', pos);
    if (nl == std::string::npos) break;
    std::string_view line(buf_.data() + pos, nl - pos);
    pos = nl + 1;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty()) continue;
    if (!on_line(line)) {
      buf_.clear();
      return false;
    }
  }
  buf_.erase(0, pos);
  return true;
}

Result<WatchEvent> ParseWatchLine(std::string_view line, uint64_t line_no) {
  const std::string where = "watch event " + std::to_string(line_no);
  Json j = Json::parse(line.begin(), line.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return InvalidArgument(where + " is not a JSON object: " + Excerpt(line));
  }
  const std::string type = StrField(j, "type");
  WatchEvent ev;
  if (type == "ADDED") {
    ev.type = EventType::kAdded;
  } else if (type == "MODIFIED") {
    ev.type = EventType::kModified;
  } else if (type == "DELETED") {
    ev.type = EventType::kDeleted;
  } else if (type == "BOOKMARK") {
    ev.type = EventType::kBookmark;
  } else if (type == "ERROR") {
    ev.type = EventType::kError;
  } else {
    return InvalidArgument(where + ": field 'type' is '" + type +
                           "', expected ADDED, MODIFIED, DELETED, BOOKMARK or ERROR");
  }
  auto obj = j.find("object");
  if (obj == j.end() || !obj->is_object()) {
    return InvalidArgument(where + " (" + type + "): field 'object' is missing or not an object");
  }
  ev.object = std::move(*obj);
  return ev;
}

}  // namespace internal

namespace {

// A line longer than this is not an object we can hold: the stream is treated as bad.
constexpr size_t kMaxLine = size_t{256} << 20;

}  // namespace

Status Client::Watch(const Resource& r, const std::string& ns, const WatchOptions& o,
                     const std::function<bool(const WatchEvent&)>& on_event,
                     const std::atomic<bool>* cancel) {
  const std::string path = r.Path(ns);
  const std::string what = "WATCH " + path;
  if (r.namespaced && !ns.empty()) {
    std::string why = internal::CheckPathSegment(ns);
    if (!why.empty()) return InvalidArgument(what + ": namespace " + why);
  }
  if (!on_event) return InvalidArgument(what + ": on_event is empty");
  std::string query = "watch=1";
  auto add = [&query](const std::string& k, const std::string& v) {
    if (!v.empty()) query += "&" + k + "=" + internal::QueryEscape(v);
  };
  add("resourceVersion", o.resource_version);
  if (o.allow_bookmarks) add("allowWatchBookmarks", "true");
  if (o.timeout_seconds > 0) add("timeoutSeconds", std::to_string(o.timeout_seconds));
  add("labelSelector", o.label_selector);
  add("fieldSelector", o.field_selector);

  bool reloaded = false;
  while (true) {
    internal::LineSplitter split;
    uint64_t line_no = 0;
    Status stream_status;
    bool consumer_stopped = false;
    auto on_line = [&](std::string_view line) {
      auto ev = internal::ParseWatchLine(line, ++line_no);
      if (!ev.ok()) {
        stream_status = ev.status().Annotate(what);
        return false;
      }
      if (ev->type == EventType::kError) {
        stream_status = internal::StatusFromApiStatus("WATCH", path, ev->object);
        return false;
      }
      impl_->watch_events.fetch_add(1, std::memory_order_relaxed);
      if (!on_event(*ev)) {
        consumer_stopped = true;
        return false;
      }
      return true;
    };
    internal::HttpRequest req;
    req.method = "GET";
    req.path = path;
    req.query = query;
    req.idle_timeout_s = o.idle_timeout_s;
    req.cancel = cancel;
    req.on_data = [&](std::string_view data) {
      if (!split.Feed(data, on_line)) return false;
      if (split.pending() > kMaxLine) {
        stream_status =
            Internal(what + ": an event line exceeds " + std::to_string(kMaxLine >> 20) + " MiB");
        return false;
      }
      return true;
    };
    impl_->requests.fetch_add(1, std::memory_order_relaxed);
    internal::HttpResult res = impl_->transport.Do(req, impl_->Token());
    if (!stream_status.ok()) return stream_status;
    if (consumer_stopped || res.cancelled) return Status::Ok();
    if (!res.completed) return Unavailable(what + ": " + res.error);
    if (res.status == 401 && !reloaded && impl_->ReloadToken(cfg_)) {
      reloaded = true;
      continue;
    }
    if (res.status / 100 != 2) return internal::StatusFromHttp("WATCH", path, res.status, res.body);
    if (split.pending() > 0) {
      return Unavailable(what + ": the stream ended in the middle of an event (" +
                         std::to_string(split.pending()) + " bytes discarded)");
    }
    return Status::Ok();
  }
}

}  // namespace bulwark::k8s
