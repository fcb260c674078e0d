// The fake API server's HTTP handler: authentication, injected faults, discovery,
// resource paths (/api/v1/..., /apis/<group>/<version>/..., namespaced or not) mapped
// onto the Store, and watch streams (chunked, bookmarks, timeouts, cuts).
#include <cctype>
#include <chrono>
#include <cmath>

#include "k8s/testing/fake_apiserver_impl.h"

namespace bulwark::k8s::testing {

namespace {

using internal::ApiError;
using internal::ApiOr;
using internal::HttpConn;
using internal::HttpHeaders;
using internal::HttpRequest;
using internal::ObjPtr;
using internal::Resolved;
using internal::StatusJson;
using internal::Store;
using SteadyTime = std::chrono::steady_clock::time_point;

constexpr const char* kJson = "application/json";

bool IsTrue(const std::string& v) { return v == "1" || v == "true"; }

std::string LowerCopy(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::vector<std::string> Segments(const std::string& path) {
  std::vector<std::string> out;
  size_t pos = 0;
  while (pos < path.size()) {
    size_t slash = path.find('/', pos);
    if (slash == std::string::npos) slash = path.size();
    if (slash > pos) out.push_back(internal::UrlDecode(path.substr(pos, slash - pos)));
    pos = slash + 1;
  }
  return out;
}

std::string WarningValue(const std::string& text) {
  std::string esc;
  for (char c : text) {
    if (c == '"' || c == '\\') esc += '\\';
    esc += c;
  }
  return "299 - \"" + esc + "\"";
}

}  // namespace

// One request being served.
class FakeApiServer::Impl::Router {
 public:
  Router(Impl& impl, const HttpRequest& req, HttpConn& c)
      : impl_(impl), store_(*impl.store), req_(req), c_(c), q_(internal::ParseQuery(req.query)) {
    rec_.method = req.method;
    rec_.path = req.path;
    rec_.query = req.query;
    rec_.watch = req.method == "GET" && IsTrue(Q("watch"));
  }

  void Run() {
    Dispatch();
    if (!recorded_) impl_.Record(rec_);
  }

 private:
  std::string Q(const char* key) const {
    auto it = q_.find(key);
    return it == q_.end() ? "" : it->second;
  }

  // Records the request, then responds (so Requests() holds it once a client has
  // its response).
  void Reply(int code, const std::string& body, const HttpHeaders& h = {},
             const char* content_type = kJson) {
    rec_.status = code;
    impl_.Record(rec_);
    recorded_ = true;
    if (!c_.Respond(code, content_type, body, h)) c_.set_closing();
  }

  void Fail(const ApiError& e) {
    HttpHeaders h;
    if (e.retry_after_s > 0) {
      h.push_back(
          {"Retry-After", std::to_string(static_cast<int64_t>(std::ceil(e.retry_after_s)))});
    }
    Reply(e.code, internal::Dump(StatusJson(e)), h);
  }

  void Dispatch();
  void Resource(const std::string& group, const std::string& version,
                std::vector<std::string> rest);
  void ListOrWatch(const Resolved& res, const std::string& version, const std::string& ns);
  void Watch(const Resolved& res, const std::string& version, const internal::WatchQuery& wq,
             int timeout_s);
  void Write(const Resolved& res, const std::string& version, const std::string& ns,
             const std::string& name, const std::string& sub);
  void Remove(const Resolved& res, const std::string& version, const std::string& ns,
              const std::string& name);
  std::optional<ApiError> WriteOptionsFromQuery(internal::WriteOptions* o) const;
  Json TableOf(const internal::ResourceInfo& info, const std::string& version,
               const std::vector<Json>& objects, const Json& list_metadata) const {
    const Clock* clock = impl_.opts.clock ? impl_.opts.clock : SystemClock::Get();
    return internal::ToTable(info, version, objects, list_metadata, Q("includeObject"),
                             clock->NowWall());
  }
  ApiOr<Json> Body() const;

  Impl& impl_;
  Store& store_;
  const HttpRequest& req_;
  HttpConn& c_;
  std::map<std::string, std::string> q_;
  RequestRecord rec_;
  bool recorded_ = false;
  internal::Rendering rendering_ = internal::Rendering::kJson;
};

void FakeApiServer::Impl::Router::Dispatch() {
  std::string token;
  {
    std::lock_guard<std::mutex> l(impl_.mu);
    token = impl_.token;
  }
  if (!token.empty() && req_.Header("authorization") != "Bearer " + token) {
    return Fail(ApiError{401, "Unauthorized", "Unauthorized"});
  }
  if (std::optional<ApiError> e = impl_.TakeFault(req_.method, req_.path, req_.query)) {
    return Fail(*e);
  }
  ApiOr<internal::Rendering> rendering = internal::NegotiateRendering(req_.Header("accept"));
  if (!rendering.ok()) return Fail(rendering.error());
  rendering_ = *rendering;
  std::vector<std::string> segs = Segments(req_.path);
  if (req_.path == "/healthz" || req_.path == "/livez" || req_.path == "/readyz") {
    return Reply(200, "ok", {}, "text/plain; charset=utf-8");
  }
  bool get = req_.method == "GET";
  if (req_.path == "/version") {
    if (!get) return Fail(internal::ErrMethodNotAllowed());
    return Reply(200, Json{{"major", "1"},
                           {"minor", "31"},
                           {"gitVersion", "v1.31.0-bulwark-fake"},
                           {"gitTreeState", "clean"},
                           {"platform", "linux/amd64"}}
                          .dump());
  }
  if (segs.empty() || (segs[0] != "api" && segs[0] != "apis")) {
    return Fail(internal::ErrNotFoundPath());
  }
  bool core = segs[0] == "api";
  std::string host = "127.0.0.1:" + std::to_string(impl_.http->port());
  if (segs.size() == 1) {
    if (!get) return Fail(internal::ErrMethodNotAllowed());
    if (core) return Reply(200, internal::ApiVersionsJson(host).dump());
    return Reply(200, internal::ApiGroupListJson(store_.Served()).dump());
  }
  if (!core && segs.size() == 2) {
    if (!get) return Fail(internal::ErrMethodNotAllowed());
    ApiOr<Json> g = internal::ApiGroupJson(store_.Served(), segs[1]);
    return g.ok() ? Reply(200, g->dump()) : Fail(g.error());
  }
  std::string group = core ? "" : segs[1];
  std::string version = core ? segs[1] : segs[2];
  std::vector<std::string> rest(segs.begin() + (core ? 2 : 3), segs.end());
  if (rest.empty()) {
    if (!get) return Fail(internal::ErrMethodNotAllowed());
    ApiOr<Json> l = internal::ApiResourceListJson(store_.Served(), group, version);
    return l.ok() ? Reply(200, l->dump()) : Fail(l.error());
  }
  Resource(group, version, std::move(rest));
}

void FakeApiServer::Impl::Router::Resource(const std::string& group, const std::string& version,
                                           std::vector<std::string> rest) {
  std::string ns;
  if (rest[0] == "namespaces" && rest.size() >= 3) {
    Resolved probe = store_.Find(group, version, rest[2]);
    if (probe && probe.info->namespaced) {
      ns = rest[1];
      rest.erase(rest.begin(), rest.begin() + 2);
    }
  }
  if (rest.size() > 3) return Fail(internal::ErrNotFoundPath());
  std::string name = rest.size() > 1 ? rest[1] : "";
  std::string sub = rest.size() > 2 ? rest[2] : "";
  Resolved res = store_.Find(group, version, rest[0]);
  if (!res) return Fail(internal::ErrNotFoundPath());
  const internal::ResourceInfo& info = *res.info;
  if ((info.namespaced && ns.empty() && !name.empty()) ||
      (!sub.empty() && !(sub == "status" && info.HasStatus(version)))) {
    return Fail(internal::ErrNotFoundPath());
  }
  const std::string& m = req_.method;
  if (m == "GET" && name.empty()) return ListOrWatch(res, version, ns);
  if (m == "GET") {
    ApiOr<ObjPtr> o = store_.Get(*res.rs, ns, name);
    if (!o.ok()) return Fail(o.error());
    if (rendering_ != internal::Rendering::kTable) {
      return Reply(200, Store::Render(info, version, **o));
    }
    Json obj = Store::RenderJson(info, version, **o);
    Json md = {{"resourceVersion", obj["metadata"].value("resourceVersion", "")}};
    return Reply(200, internal::Dump(TableOf(info, version, {obj}, md)));
  }
  if (m == "POST" || m == "PUT" || m == "PATCH") {
    if ((m == "POST") != name.empty()) return Fail(internal::ErrMethodNotAllowed());
    return Write(res, version, ns, name, sub);
  }
  if (m == "DELETE" && sub.empty()) return Remove(res, version, ns, name);
  Fail(internal::ErrMethodNotAllowed());
}

void FakeApiServer::Impl::Router::ListOrWatch(const Resolved& res, const std::string& version,
                                              const std::string& ns) {
  ApiOr<internal::LabelSelector> labels = internal::ParseLabelSelector(Q("labelSelector"));
  if (!labels.ok()) return Fail(labels.error());
  ApiOr<internal::FieldSelector> fields =
      internal::ParseFieldSelector(Q("fieldSelector"), *res.info);
  if (!fields.ok()) return Fail(fields.error());
  auto parse_int = [&](const char* key, int64_t* out) {
    std::string v = Q(key);
    if (v.empty()) return true;
    char* end = nullptr;
    long long n = std::strtoll(v.c_str(), &end, 10);  // NOLINT(runtime/int)
    if (*end != '\0' || n < 0) return false;
    *out = n;
    return true;
  };
  if (rec_.watch) {
    if (rendering_ == internal::Rendering::kTable) {
      return Fail(ApiError{406, "NotAcceptable",
                           "Table output of watches is not reproduced by this fake API server; "
                           "accept application/json"});
    }
    internal::WatchQuery wq;
    wq.ns = ns;
    wq.labels = *labels;
    wq.fields = *fields;
    wq.resource_version = Q("resourceVersion");
    wq.bookmarks = IsTrue(Q("allowWatchBookmarks"));
    wq.send_initial_events = IsTrue(Q("sendInitialEvents"));
    std::string match = Q("resourceVersionMatch");
    if (wq.send_initial_events && (match != "NotOlderThan" || !wq.bookmarks)) {
      return Fail(internal::ErrBadRequest(
          "sendInitialEvents=true requires resourceVersionMatch=NotOlderThan and "
          "allowWatchBookmarks=true"));
    }
    if (!wq.send_initial_events && !match.empty()) {
      return Fail(internal::ErrBadRequest(
          "resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided"));
    }
    int64_t timeout = 0;
    if (!parse_int("timeoutSeconds", &timeout)) {
      return Fail(internal::ErrBadRequest("timeoutSeconds must be a non-negative integer, got " +
                                          internal::Quote(Q("timeoutSeconds"))));
    }
    int cap = impl_.opts.max_watch_timeout_s;
    return Watch(res, version, wq, timeout > 0 && timeout < cap ? static_cast<int>(timeout) : cap);
  }
  internal::ListQuery lq;
  lq.ns = ns;
  lq.labels = *labels;
  lq.fields = *fields;
  if (!parse_int("limit", &lq.limit)) {
    return Fail(internal::ErrBadRequest("limit must be a non-negative integer, got " +
                                        internal::Quote(Q("limit"))));
  }
  lq.continue_token = Q("continue");
  lq.resource_version = Q("resourceVersion");
  lq.resource_version_match = Q("resourceVersionMatch");
  ApiOr<std::string> list = store_.List(*res.rs, version, lq);
  if (!list.ok()) return Fail(list.error());
  if (rendering_ != internal::Rendering::kTable) return Reply(200, *list);
  Json parsed = Json::parse(*list);
  std::vector<Json> items(parsed["items"].begin(), parsed["items"].end());
  Reply(200, internal::Dump(TableOf(*res.info, version, items, parsed["metadata"])));
}

void FakeApiServer::Impl::Router::Watch(const Resolved& res, const std::string& version,
                                        const internal::WatchQuery& wq, int timeout_s) {
  ApiOr<std::shared_ptr<internal::Watcher>> started = store_.Watch(res.rs, version, wq);
  if (!started.ok() && started.error().code != 410) return Fail(started.error());
  rec_.status = 200;
  impl_.Record(rec_);
  recorded_ = true;
  if (!c_.StartStream(200, kJson)) return c_.set_closing();
  if (!started.ok()) {  // too old: one ERROR event, as kube-apiserver sends it
    Json ev = {{"type", "ERROR"}, {"object", StatusJson(started.error())}};
    if (!c_.WriteChunk(internal::Dump(ev) + "\n") || !c_.EndStream()) c_.set_closing();
    return;
  }
  internal::Watcher& w = **started;
  const internal::ResourceInfo& info = *w.info;
  auto bookmark = [&](uint64_t rv, bool initial_end) {
    Json md = {{"resourceVersion", std::to_string(rv)}};
    if (initial_end) md["annotations"] = {{"k8s.io/initial-events-end", "true"}};
    Json obj = {{"kind", info.kind}, {"apiVersion", info.ApiVersion(version)}, {"metadata", md}};
    return internal::Dump(Json{{"type", "BOOKMARK"}, {"object", obj}}) + "\n";
  };
  // Writes one event line; false when the stream is over (cut or write failure).
  auto emit = [&](const std::string& line) {
    bool cut;
    {
      std::lock_guard<std::mutex> l(w.mu);
      cut = w.cut;
    }
    if (cut) {
      c_.WriteChunk(std::string_view(line).substr(0, line.size() / 2));
      c_.Cut();
      return false;
    }
    if (c_.WriteChunk(line)) return true;
    c_.set_closing();
    return false;
  };
  using std::chrono::steady_clock;
  auto interval = std::chrono::duration_cast<steady_clock::duration>(
      std::chrono::duration<double>(impl_.opts.bookmark_interval_s));
  SteadyTime deadline = steady_clock::now() + std::chrono::seconds(timeout_s);
  SteadyTime next_bookmark = steady_clock::now() + interval;
  bool initial_pending = wq.send_initial_events;
  size_t written = 0;
  bool open = !initial_pending || w.initial_events > 0 || emit(bookmark(w.initial_rv, true));
  initial_pending = initial_pending && w.initial_events > 0;
  while (open) {
    std::deque<internal::WatchItem> items;
    bool end;
    {
      std::unique_lock<std::mutex> l(w.mu);
      SteadyTime until = std::min(steady_clock::now() + std::chrono::milliseconds(250), deadline);
      if (wq.bookmarks) until = std::min(until, next_bookmark);
      w.cv.wait_until(l, until, [&] { return !w.queue.empty() || w.end || w.overflow; });
      items.swap(w.queue);
      end = w.end || w.overflow;
    }
    if (c_.Stopping()) {
      c_.Cut();
      break;
    }
    for (const internal::WatchItem& it : items) {
      std::string line = std::string("{\"type\":\"") + it.type +
                         "\",\"object\":" + Store::Render(info, version, *it.obj) + "}\n";
      if (!(open = emit(line))) break;
      if (initial_pending && ++written == w.initial_events) {
        initial_pending = false;
        if (!(open = emit(bookmark(w.initial_rv, true)))) break;
      }
    }
    if (!open) break;
    SteadyTime now = steady_clock::now();
    if (end || now >= deadline) {
      if (!c_.EndStream()) c_.set_closing();
      break;
    }
    if (wq.bookmarks && now >= next_bookmark) {
      uint64_t rv = store_.BookmarkRv(&w);
      if (rv != 0 && !(open = emit(bookmark(rv, false)))) break;
      next_bookmark = now + interval;
    }
    if (items.empty() && c_.PeerClosed()) {
      c_.set_closing();
      break;
    }
  }
  store_.Unwatch(&w);
}

std::optional<ApiError> FakeApiServer::Impl::Router::WriteOptionsFromQuery(
    internal::WriteOptions* o) const {
  if (!Q("dryRun").empty()) {
    return internal::ErrBadRequest("dryRun is not supported by the fake API server");
  }
  std::string fv = Q("fieldValidation");
  if (fv == "Strict") {
    o->validation = internal::FieldValidation::kStrict;
  } else if (fv == "Ignore") {
    o->validation = internal::FieldValidation::kIgnore;
  } else if (fv.empty() || fv == "Warn") {
    o->validation = internal::FieldValidation::kWarn;
  } else {
    return internal::ErrBadRequest("fieldValidation: Unsupported value: " + internal::Quote(fv) +
                                   ": supported values: \"Ignore\", \"Strict\", \"Warn\"");
  }
  return std::nullopt;
}

ApiOr<Json> FakeApiServer::Impl::Router::Body() const {
  if (req_.body.empty()) return internal::ErrBadRequest("the request body is empty; send JSON");
  try {
    return Json::parse(req_.body);
  } catch (const Json::exception& e) {
    return internal::ErrBadRequest(std::string("the request body is not valid JSON: ") + e.what());
  }
}

void FakeApiServer::Impl::Router::Write(const Resolved& res, const std::string& version,
                                        const std::string& ns, const std::string& name,
                                        const std::string& sub) {
  const internal::ResourceInfo& info = *res.info;
  if (info.namespaced && ns.empty()) return Fail(internal::ErrNotFoundPath());
  internal::WriteOptions o;
  if (std::optional<ApiError> e = WriteOptionsFromQuery(&o)) return Fail(*e);
  o.status = sub == "status";
  std::string ct = LowerCopy(req_.Header("content-type"));
  ct = ct.substr(0, ct.find(';'));
  ApiOr<ObjPtr> out = internal::ErrNotFoundPath();
  if (req_.method == "PATCH") {
    internal::PatchKind kind;
    if (ct == "application/merge-patch+json") {
      kind = internal::PatchKind::kMerge;
    } else if (ct == "application/strategic-merge-patch+json") {
      kind = internal::PatchKind::kStrategic;
    } else if (ct == "application/json-patch+json") {
      kind = internal::PatchKind::kJson;
    } else if (ct == "application/apply-patch+yaml") {
      return Fail(internal::ErrUnsupportedMediaType(
          "server-side apply is not supported by the fake API server; use "
          "application/merge-patch+json"));
    } else {
      return Fail(internal::ErrUnsupportedMediaType(
          "the body of the request was in an unknown format (" + ct +
          ") - accepted media types include: application/json-patch+json, "
          "application/merge-patch+json, application/strategic-merge-patch+json"));
    }
    out = store_.Patch(*res.rs, version, ns, name, kind, req_.body, &o);
  } else {
    if (!ct.empty() && ct != "application/json") {
      return Fail(internal::ErrUnsupportedMediaType(
          "the body of the request was in an unknown format (" + ct +
          ") - the fake API server accepts application/json"));
    }
    ApiOr<Json> body = Body();
    if (!body.ok()) return Fail(body.error());
    if (req_.method == "POST") {
      out = store_.Create(*res.rs, version, ns, std::move(*body), &o);
    } else {
      out = store_.Update(*res.rs, version, ns, name, std::move(*body), &o);
    }
  }
  if (!out.ok()) return Fail(out.error());
  HttpHeaders h;
  for (const std::string& w : o.warnings) h.push_back({"Warning", WarningValue(w)});
  Reply(req_.method == "POST" ? 201 : 200, Store::Render(info, version, **out), h);
}

void FakeApiServer::Impl::Router::Remove(const Resolved& res, const std::string& version,
                                         const std::string& ns, const std::string& name) {
  const internal::ResourceInfo& info = *res.info;
  internal::DeleteOptions o;
  o.propagation = Q("propagationPolicy");
  if (!req_.body.empty()) {
    ApiOr<Json> body = Body();
    if (!body.ok()) return Fail(body.error());
    if (!body->is_object()) return Fail(internal::ErrBadRequest("DeleteOptions must be an object"));
    const Json& b = *body;
    if (b.contains("propagationPolicy") && b["propagationPolicy"].is_string()) {
      o.propagation = b["propagationPolicy"].get<std::string>();
    }
    if (internal::BoolField(b, "orphanDependents", false)) o.propagation = "Orphan";
    if (b.contains("preconditions") && b["preconditions"].is_object()) {
      o.precondition_uid = internal::StrField(b["preconditions"], "uid");
      o.precondition_rv = internal::StrField(b["preconditions"], "resourceVersion");
    }
  }
  if (!o.propagation.empty() && o.propagation != "Orphan" && o.propagation != "Background" &&
      o.propagation != "Foreground") {
    return Fail(internal::ErrBadRequest(
        "propagationPolicy: Unsupported value: " + internal::Quote(o.propagation) +
        ": supported values: \"Background\", \"Foreground\", \"Orphan\""));
  }
  if (!Q("dryRun").empty()) {
    return Fail(internal::ErrBadRequest("dryRun is not supported by the fake API server"));
  }
  auto success = [&](const std::string& n, const std::string& uid) {
    Json details = {{"name", n}, {"kind", info.plural}};
    if (!info.group.empty()) details["group"] = info.group;
    if (!uid.empty()) details["uid"] = uid;
    return Json{{"kind", "Status"},
                {"apiVersion", "v1"},
                {"metadata", Json::object()},
                {"status", "Success"},
                {"details", details}}
        .dump(-1, ' ', false, Json::error_handler_t::replace);
  };
  if (name.empty()) {  // deletecollection
    ApiOr<internal::LabelSelector> labels = internal::ParseLabelSelector(Q("labelSelector"));
    if (!labels.ok()) return Fail(labels.error());
    ApiOr<internal::FieldSelector> fields = internal::ParseFieldSelector(Q("fieldSelector"), info);
    if (!fields.ok()) return Fail(fields.error());
    for (const ObjPtr& obj : store_.ListAll(*res.rs, ns)) {
      if (!labels->Matches(obj->obj) || !fields->Matches(obj->obj)) continue;
      (void)store_.Delete(*res.rs, obj->ns, internal::MetaOf(obj->obj).value("name", ""), o);
    }
    return Reply(200, success("", ""));
  }
  ApiOr<internal::DeleteOutcome> d = store_.Delete(*res.rs, ns, name, o);
  if (!d.ok()) return Fail(d.error());
  if (d->removed) return Reply(200, success(name, internal::MetaOf(d->obj->obj).value("uid", "")));
  Reply(200, Store::Render(info, version, *d->obj));
}

void FakeApiServer::Impl::Handle(const HttpRequest& req, HttpConn& c) {
  Router(*this, req, c).Run();
}

}  // namespace bulwark::k8s::testing
