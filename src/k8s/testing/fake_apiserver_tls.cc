// TLS for the fake API server: an in-memory CA and server certificate, and TLS streams
// over non-blocking sockets with bounded, stop-aware waits.
#include <errno.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509v3.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <chrono>
#include <random>

#include "common/clock.h"
#include "k8s/testing/fake_apiserver_http.h"

namespace bulwark::k8s::testing::internal {

namespace {

std::string SslError(const std::string& what) {
  unsigned long e = ERR_get_error();  // NOLINT(runtime/int)
  char buf[256] = "unknown error";
  if (e != 0) ERR_error_string_n(e, buf, sizeof(buf));
  ERR_clear_error();
  return what + ": " + buf;
}

using KeyPtr = std::unique_ptr<EVP_PKEY, decltype(&EVP_PKEY_free)>;
using CertPtr = std::unique_ptr<X509, decltype(&X509_free)>;

bool AddExt(X509* cert, X509* issuer, int nid, const char* value) {
  X509V3_CTX ctx;
  X509V3_set_ctx(&ctx, issuer, cert, nullptr, nullptr, 0);
  X509_EXTENSION* ext = X509V3_EXT_nconf_nid(nullptr, &ctx, nid, value);
  if (ext == nullptr) return false;
  bool ok = X509_add_ext(cert, ext, -1) == 1;
  X509_EXTENSION_free(ext);
  return ok;
}

// A certificate for `key` named `cn`, signed by issuer/issuer_key (self-signed when
// issuer is nullptr), with the given extensions.
Result<CertPtr> MakeCert(EVP_PKEY* key, const char* cn, X509* issuer, EVP_PKEY* issuer_key,
                         const std::vector<std::pair<int, const char*>>& exts) {
  CertPtr cert(X509_new(), X509_free);
  if (!cert) return Internal(SslError("X509_new"));
  std::random_device rd;
  uint64_t serial = (static_cast<uint64_t>(rd()) << 31) ^ rd();
  X509_set_version(cert.get(), 2);
  ASN1_INTEGER_set_uint64(X509_get_serialNumber(cert.get()), serial);
  X509_gmtime_adj(X509_getm_notBefore(cert.get()), -3600);
  X509_gmtime_adj(X509_getm_notAfter(cert.get()), 10L * 365 * 24 * 3600);
  X509_set_pubkey(cert.get(), key);
  X509_NAME* name = X509_get_subject_name(cert.get());
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, reinterpret_cast<const unsigned char*>(cn),
                             -1, -1, 0);
  X509_set_issuer_name(cert.get(), issuer ? X509_get_subject_name(issuer) : name);
  for (const auto& [nid, value] : exts) {
    if (!AddExt(cert.get(), issuer ? issuer : cert.get(), nid, value)) {
      return Internal(SslError(std::string("certificate extension ") + value));
    }
  }
  if (X509_sign(cert.get(), issuer_key, EVP_sha256()) == 0) return Internal(SslError("X509_sign"));
  return cert;
}

std::string CertPem(X509* cert) {
  BIO* b = BIO_new(BIO_s_mem());
  PEM_write_bio_X509(b, cert);
  char* data = nullptr;
  long n = BIO_get_mem_data(b, &data);  // NOLINT(runtime/int)
  std::string pem(data, static_cast<size_t>(n));
  BIO_free(b);
  return pem;
}

}  // namespace

Result<TlsIdentity> MakeTlsIdentity() {
  KeyPtr ca_key(EVP_EC_gen("P-256"), EVP_PKEY_free);
  KeyPtr key(EVP_EC_gen("P-256"), EVP_PKEY_free);
  if (!ca_key || !key) return Internal(SslError("EC P-256 key generation"));
  BW_ASSIGN_OR_RETURN(CertPtr ca,
                      MakeCert(ca_key.get(), "bulwark-fake-apiserver-ca", nullptr, ca_key.get(),
                               {{NID_basic_constraints, "critical,CA:TRUE"},
                                {NID_key_usage, "critical,keyCertSign,cRLSign,digitalSignature"},
                                {NID_subject_key_identifier, "hash"}}));
  BW_ASSIGN_OR_RETURN(
      CertPtr cert,
      MakeCert(key.get(), "kube-apiserver", ca.get(), ca_key.get(),
               {{NID_basic_constraints, "critical,CA:FALSE"},
                {NID_key_usage, "critical,digitalSignature,keyEncipherment"},
                {NID_ext_key_usage, "serverAuth"},
                {NID_subject_key_identifier, "hash"},
                {NID_authority_key_identifier, "keyid:always"},
                {NID_subject_alt_name,
                 "IP:127.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default.svc"}}));
  std::shared_ptr<SSL_CTX> ctx(SSL_CTX_new(TLS_server_method()), SSL_CTX_free);
  if (!ctx) return Internal(SslError("SSL_CTX_new"));
  SSL_CTX_set_min_proto_version(ctx.get(), TLS1_2_VERSION);
  SSL_CTX_set_mode(ctx.get(), SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
  if (SSL_CTX_use_certificate(ctx.get(), cert.get()) != 1 ||
      SSL_CTX_use_PrivateKey(ctx.get(), key.get()) != 1 ||
      SSL_CTX_check_private_key(ctx.get()) != 1) {
    return Internal(SslError("loading the server certificate"));
  }
  return TlsIdentity{ctx, CertPem(ca.get())};
}

TlsStream::TlsStream(SSL_CTX* ctx, Fd fd, const std::atomic<bool>* stop)
    : fd_(std::move(fd)), stop_(stop) {
  ssl_ = SSL_new(ctx);
  rbio_ = BIO_new(BIO_s_mem());
  wbio_ = BIO_new(BIO_s_mem());
  BIO_set_mem_eof_return(rbio_, -1);  // an empty read BIO means "retry", not EOF
  SSL_set_bio(ssl_, rbio_, wbio_);
  SSL_set_accept_state(ssl_);
}

TlsStream::~TlsStream() {
  SSL_free(ssl_);
  ERR_clear_error();
}

bool TlsStream::Flush(double deadline) {
  char buf[16384];
  while (BIO_ctrl_pending(wbio_) > 0) {
    int n = BIO_read(wbio_, buf, sizeof(buf));
    if (n <= 0) return false;
    int off = 0;
    while (off < n) {
      ssize_t w = ::send(fd_.get(), buf + off, static_cast<size_t>(n - off), MSG_NOSIGNAL);
      if (w > 0) {
        off += static_cast<int>(w);
        continue;
      }
      if (w < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return false;
      double left = deadline - SystemClock::Get()->NowMono();
      if (left <= 0 || Stopping()) return false;
      pollfd p{fd_.get(), POLLOUT, 0};
      ::poll(&p, 1, static_cast<int>(std::min(left, 0.1) * 1000) + 1);
    }
  }
  return true;
}

int TlsStream::Fill(double deadline) {
  char buf[16384];
  while (true) {
    ssize_t n = ::recv(fd_.get(), buf, sizeof(buf), 0);
    if (n > 0) {
      BIO_write(rbio_, buf, static_cast<int>(n));
      return 1;
    }
    if (n == 0) return 0;
    if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return -1;
    double left = deadline - SystemClock::Get()->NowMono();
    if (left <= 0 || Stopping()) return -1;
    pollfd p{fd_.get(), POLLIN, 0};
    ::poll(&p, 1, static_cast<int>(std::min(left, 0.1) * 1000) + 1);
  }
}

bool TlsStream::Handshake(double timeout_s) {
  double deadline = SystemClock::Get()->NowMono() + timeout_s;
  while (true) {
    int r = SSL_do_handshake(ssl_);
    if (!Flush(deadline)) return false;
    if (r == 1) return true;
    int err = SSL_get_error(ssl_, r);
    if (err != SSL_ERROR_WANT_READ && err != SSL_ERROR_WANT_WRITE) {
      ERR_clear_error();
      return false;
    }
    if (err == SSL_ERROR_WANT_READ && Fill(deadline) <= 0) return false;
  }
}

int TlsStream::Read(char* buf, int n, double timeout_s) {
  double deadline = SystemClock::Get()->NowMono() + timeout_s;
  while (true) {
    int r = SSL_read(ssl_, buf, n);
    if (r > 0) return r;
    int err = SSL_get_error(ssl_, r);
    if (err == SSL_ERROR_ZERO_RETURN) return 0;
    if (err != SSL_ERROR_WANT_READ && err != SSL_ERROR_WANT_WRITE) {
      ERR_clear_error();
      return -1;
    }
    if (!Flush(deadline)) return -1;
    if (err == SSL_ERROR_WANT_READ) {
      int f = Fill(deadline);
      if (f <= 0) return f;
    }
  }
}

bool TlsStream::Write(std::string_view data, double timeout_s) {
  double deadline = SystemClock::Get()->NowMono() + timeout_s;
  size_t off = 0;
  while (off < data.size()) {
    int len = static_cast<int>(std::min<size_t>(data.size() - off, 64 * 1024));
    int r = SSL_write(ssl_, data.data() + off, len);
    if (r <= 0) {
      ERR_clear_error();
      return false;
    }
    off += static_cast<size_t>(r);
    if (!Flush(deadline)) return false;
  }
  return Flush(deadline);
}

bool TlsStream::PeerClosed() {
  pollfd p{fd_.get(), POLLIN | POLLRDHUP, 0};
  if (::poll(&p, 1, 0) <= 0) return false;
  if (p.revents & (POLLERR | POLLHUP | POLLRDHUP | POLLNVAL)) return true;
  int f = Fill(SystemClock::Get()->NowMono());
  if (f == 0) return true;
  if (f < 0) return false;
  char scratch[512];
  int r = SSL_read(ssl_, scratch, sizeof(scratch));  // bytes sent mid-watch are dropped
  if (r > 0) return false;
  int err = SSL_get_error(ssl_, r);
  ERR_clear_error();
  return err == SSL_ERROR_ZERO_RETURN || err == SSL_ERROR_SSL || err == SSL_ERROR_SYSCALL;
}

void TlsStream::Close() {
  if (!fd_.valid()) return;
  SSL_shutdown(ssl_);
  Flush(SystemClock::Get()->NowMono() + 0.2);
  ERR_clear_error();
  fd_.Reset();
}

void TlsStream::Abort() {
  if (!fd_.valid()) return;
  ::shutdown(fd_.get(), SHUT_RDWR);
  fd_.Reset();
}

}  // namespace bulwark::k8s::testing::internal
