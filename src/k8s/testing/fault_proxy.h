// FaultProxy: an HTTPS proxy in front of a real kube-apiserver that injects what a real
// server cannot be made to do on demand — 429 and 5xx answers with Retry-After, a watch
// stream cut in the middle of an event, a watch ended by the server — and records the
// requests that passed, for the API client's contract suite. Everything else is the
// real server's answer, forwarded unchanged (status, body, Content-Type, Warning and
// Retry-After headers); watch responses are streamed event by event.
//
// Credentials: a request's Authorization header is forwarded; a request without one is
// sent upstream with the proxy's own client certificate (`upstream`'s), since TLS client
// certificates end at the proxy.
//
// Thread-safe: every public method may be called from any thread. Stop() (and the
// destructor) closes every connection and joins every thread; bounded (~1 s: an open
// watch notices within libcurl's progress interval).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "k8s/client.h"

namespace bulwark::k8s::testing {

struct RequestRecord {
  std::string method;  // GET, POST, PUT, PATCH, DELETE
  std::string path;    // without the query
  std::string query;
  int status = 0;  // the status the client got
  bool watch = false;
  bool injected = false;  // answered by FailNext, never reached the server
};

class FaultProxy {
 public:
  // `upstream`: the real server (its URL and CA, and the client certificate used for
  // requests that carry no Authorization header).
  static Result<std::unique_ptr<FaultProxy>> Start(ClientConfig upstream);
  ~FaultProxy();
  FaultProxy(const FaultProxy&) = delete;
  FaultProxy& operator=(const FaultProxy&) = delete;

  std::string url() const;  // "https://127.0.0.1:PORT"
  std::string ca_pem() const;
  // `cfg` pointed at the proxy: its server and CA replaced, its token kept, its client
  // certificate dropped (the proxy authenticates tokenless requests itself).
  ClientConfig Through(ClientConfig cfg) const;

  // The next `n` requests whose "METHOD path?query" contains `match` ("" = any) are
  // answered with `http_status` and a Status body of the matching reason (Retry-After,
  // rounded up to whole seconds, when retry_after_s > 0), without reaching the server.
  // Rules queue: a request consumes one count of the first pending rule it matches.
  void FailNext(int n, int http_status, double retry_after_s = 0, const std::string& match = "");
  // Every watch stream open now is cut mid-way through the next event it forwards (a
  // chunk holding the first half of the event's line, then the connection is closed
  // without the terminating chunk). Streams opened later are not affected.
  void CutWatches();
  // Ends every open watch stream cleanly (as the server's timeoutSeconds would).
  void EndWatches();

  // The requests so far, in the order they were answered. A request is recorded before
  // its client gets the answer (a watch: before its stream ends), except a watch cut by
  // CutWatches, recorded just after the cut.
  std::vector<RequestRecord> Requests() const;
  int OpenWatches() const;

  void Stop();

 private:
  FaultProxy();
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace bulwark::k8s::testing
