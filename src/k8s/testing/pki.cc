#include "k8s/testing/pki.h"

#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509v3.h>

#include <memory>
#include <random>

namespace bulwark::k8s::testing {

namespace {

using KeyPtr = std::unique_ptr<EVP_PKEY, decltype(&EVP_PKEY_free)>;
using CertPtr = std::unique_ptr<X509, decltype(&X509_free)>;
using BioPtr = std::unique_ptr<BIO, decltype(&BIO_free)>;

std::string SslError(const std::string& what) {
  unsigned long e = ERR_get_error();  // NOLINT(runtime/int)
  char buf[256] = "unknown error";
  if (e != 0) ERR_error_string_n(e, buf, sizeof(buf));
  ERR_clear_error();
  return what + ": " + buf;
}

std::string BioString(BIO* b) {
  char* data = nullptr;
  long n = BIO_get_mem_data(b, &data);  // NOLINT(runtime/int)
  return std::string(data, static_cast<size_t>(n));
}

Result<std::string> KeyPem(EVP_PKEY* key) {
  BioPtr b(BIO_new(BIO_s_mem()), BIO_free);
  if (PEM_write_bio_PrivateKey(b.get(), key, nullptr, nullptr, 0, nullptr, nullptr) != 1) {
    return Internal(SslError("PEM_write_bio_PrivateKey"));
  }
  return BioString(b.get());
}

Result<std::string> CertPem(X509* cert) {
  BioPtr b(BIO_new(BIO_s_mem()), BIO_free);
  if (PEM_write_bio_X509(b.get(), cert) != 1) return Internal(SslError("PEM_write_bio_X509"));
  return BioString(b.get());
}

Result<KeyPtr> ReadKey(const std::string& pem) {
  BioPtr b(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())), BIO_free);
  KeyPtr k(PEM_read_bio_PrivateKey(b.get(), nullptr, nullptr, nullptr), EVP_PKEY_free);
  if (!k) return InvalidArgument(SslError("reading a private key PEM"));
  return k;
}

Result<CertPtr> ReadCert(const std::string& pem) {
  BioPtr b(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())), BIO_free);
  CertPtr c(PEM_read_bio_X509(b.get(), nullptr, nullptr, nullptr), X509_free);
  if (!c) return InvalidArgument(SslError("reading a certificate PEM"));
  return c;
}

Result<KeyPtr> NewKey() {
  KeyPtr k(EVP_EC_gen("P-256"), EVP_PKEY_free);
  if (!k) return Internal(SslError("EC P-256 key generation"));
  return k;
}

Status AddExt(X509* cert, X509* issuer, int nid, const std::string& value) {
  X509V3_CTX ctx;
  X509V3_set_ctx(&ctx, issuer, cert, nullptr, nullptr, 0);
  X509_EXTENSION* ext = X509V3_EXT_nconf_nid(nullptr, &ctx, nid, value.c_str());
  if (ext == nullptr) return Internal(SslError("certificate extension " + value));
  const bool ok = X509_add_ext(cert, ext, -1) == 1;
  X509_EXTENSION_free(ext);
  return ok ? Status::Ok() : Internal(SslError("X509_add_ext " + value));
}

// A certificate for `key` (subject cn/orgs), signed by issuer/issuer_key (self-signed
// when issuer is null), with the given extensions.
Result<CertPtr> Sign(EVP_PKEY* key, const std::string& cn, const std::vector<std::string>& orgs,
                     X509* issuer, EVP_PKEY* issuer_key,
                     const std::vector<std::pair<int, std::string>>& exts) {
  CertPtr cert(X509_new(), X509_free);
  if (!cert) return Internal(SslError("X509_new"));
  std::random_device rd;
  const uint64_t serial = ((static_cast<uint64_t>(rd()) << 31) ^ rd()) | 1;
  X509_set_version(cert.get(), 2);
  ASN1_INTEGER_set_uint64(X509_get_serialNumber(cert.get()), serial);
  X509_gmtime_adj(X509_getm_notBefore(cert.get()), -3600);
  X509_gmtime_adj(X509_getm_notAfter(cert.get()), 10L * 365 * 24 * 3600);
  X509_set_pubkey(cert.get(), key);
  X509_NAME* name = X509_get_subject_name(cert.get());
  for (const std::string& o : orgs) {
    X509_NAME_add_entry_by_txt(name, "O", MBSTRING_UTF8,
                               reinterpret_cast<const unsigned char*>(o.c_str()), -1, -1, 0);
  }
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_UTF8,
                             reinterpret_cast<const unsigned char*>(cn.c_str()), -1, -1, 0);
  X509_set_issuer_name(cert.get(), issuer ? X509_get_subject_name(issuer) : name);
  for (const auto& [nid, value] : exts) {
    BW_RETURN_IF_ERROR(AddExt(cert.get(), issuer ? issuer : cert.get(), nid, value));
  }
  if (X509_sign(cert.get(), issuer_key, EVP_sha256()) == 0) return Internal(SslError("X509_sign"));
  return cert;
}

}  // namespace

Result<KeyPair> MakeCa(const std::string& cn) {
  BW_ASSIGN_OR_RETURN(KeyPtr key, NewKey());
  BW_ASSIGN_OR_RETURN(CertPtr cert,
                      Sign(key.get(), cn, {}, nullptr, key.get(),
                           {{NID_basic_constraints, "critical,CA:TRUE"},
                            {NID_key_usage, "critical,keyCertSign,cRLSign,digitalSignature"},
                            {NID_subject_key_identifier, "hash"}}));
  KeyPair out;
  BW_ASSIGN_OR_RETURN(out.key_pem, KeyPem(key.get()));
  BW_ASSIGN_OR_RETURN(out.cert_pem, CertPem(cert.get()));
  return out;
}

Result<KeyPair> IssueCert(const KeyPair& ca, const CertRequest& req) {
  if (req.cn.empty()) return InvalidArgument("IssueCert: cn is empty");
  if (!req.server && !req.client) return InvalidArgument("IssueCert: neither server nor client");
  BW_ASSIGN_OR_RETURN(KeyPtr ca_key, ReadKey(ca.key_pem));
  BW_ASSIGN_OR_RETURN(CertPtr ca_cert, ReadCert(ca.cert_pem));
  BW_ASSIGN_OR_RETURN(KeyPtr key, NewKey());
  std::vector<std::pair<int, std::string>> exts = {
      {NID_basic_constraints, "critical,CA:FALSE"},
      {NID_key_usage, "critical,digitalSignature,keyEncipherment"},
      {NID_ext_key_usage, req.server && req.client ? "serverAuth,clientAuth"
                          : req.server             ? "serverAuth"
                                                   : "clientAuth"},
      {NID_subject_key_identifier, "hash"},
      {NID_authority_key_identifier, "keyid:always"}};
  std::string san;
  for (const std::string& d : req.dns_names) san += (san.empty() ? "" : ",") + ("DNS:" + d);
  for (const std::string& ip : req.ips) san += (san.empty() ? "" : ",") + ("IP:" + ip);
  if (!san.empty()) exts.push_back({NID_subject_alt_name, san});
  BW_ASSIGN_OR_RETURN(
      CertPtr cert, Sign(key.get(), req.cn, req.organizations, ca_cert.get(), ca_key.get(), exts));
  KeyPair out;
  BW_ASSIGN_OR_RETURN(out.key_pem, KeyPem(key.get()));
  BW_ASSIGN_OR_RETURN(out.cert_pem, CertPem(cert.get()));
  return out;
}

Result<KeyPair> MakeSigningKey() {
  BW_ASSIGN_OR_RETURN(KeyPtr key, NewKey());
  KeyPair out;
  BW_ASSIGN_OR_RETURN(out.key_pem, KeyPem(key.get()));
  BioPtr b(BIO_new(BIO_s_mem()), BIO_free);
  if (PEM_write_bio_PUBKEY(b.get(), key.get()) != 1) {
    return Internal(SslError("PEM_write_bio_PUBKEY"));
  }
  out.cert_pem = BioString(b.get());
  return out;
}

}  // namespace bulwark::k8s::testing
