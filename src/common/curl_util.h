// libcurl plumbing shared by Bulwark's HTTP clients (objstore's S3 client and the
// Kubernetes API client): the process-wide init, an owned header list and the
// options every one of our transfers sets. Library bw_curl.
#pragma once

#include <curl/curl.h>

#include <string>

#include "common/status.h"

namespace bulwark::curl {

// curl_global_init, once per process; the same result on every call. Thread-safe.
Status GlobalInit();

// A request's header list, freed with it. Not thread-safe; one per transfer.
struct HeaderList {
  curl_slist* list = nullptr;
  HeaderList() = default;
  HeaderList(const HeaderList&) = delete;
  HeaderList& operator=(const HeaderList&) = delete;
  ~HeaderList() { curl_slist_free_all(list); }
  void Add(const std::string& header);  // "Name: value"; "Name:" removes curl's default
};

// curl_easy_reset(h), then what every transfer of ours sets: `errbuf` (at least
// CURL_ERROR_SIZE bytes, cleared) as the error buffer, `url` sent as is (no dot-segment
// squashing), no signals, HTTP/1.1, TCP keep-alive, no redirects. The caller adds
// timeouts, headers, callbacks and TLS.
void ResetWithBaseOptions(CURL* h, const std::string& url, char* errbuf);

}  // namespace bulwark::curl
