#include "common/curl_util.h"

#include <mutex>

namespace bulwark::curl {

Status GlobalInit() {
  static std::once_flag once;
  static CURLcode code = CURLE_FAILED_INIT;
  std::call_once(once, [] { code = curl_global_init(CURL_GLOBAL_DEFAULT); });
  if (code != CURLE_OK)
    return Internal(std::string("curl_global_init: ") + curl_easy_strerror(code));
  return Status::Ok();
}

void HeaderList::Add(const std::string& header) {
  curl_slist* n = curl_slist_append(list, header.c_str());
  if (n != nullptr) list = n;
}

void ResetWithBaseOptions(CURL* h, const std::string& url, char* errbuf) {
  curl_easy_reset(h);
  errbuf[0] = '\0';
  curl_easy_setopt(h, CURLOPT_ERRORBUFFER, errbuf);
  curl_easy_setopt(h, CURLOPT_URL, url.c_str());
  curl_easy_setopt(h, CURLOPT_PATH_AS_IS, 1L);
  curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(h, CURLOPT_HTTP_VERSION, CURL_HTTP_VERSION_1_1);
  curl_easy_setopt(h, CURLOPT_TCP_KEEPALIVE, 1L);
  curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, 0L);
}

}  // namespace bulwark::curl
