// Test PKI for the local control plane (control_plane.h) and the fault proxy
// (fault_proxy.h): EC P-256 keys and X.509 certificates made in memory with OpenSSL,
// written out as PEM. Test infrastructure only.
//
// Thread-safe (no shared state).
#pragma once

#include <string>
#include <vector>

#include "common/status.h"

namespace bulwark::k8s::testing {

struct KeyPair {
  std::string key_pem;   // PKCS#8 private key
  std::string cert_pem;  // X.509 certificate
};

// A self-signed CA certificate (CA:TRUE, keyCertSign) named `cn`.
Result<KeyPair> MakeCa(const std::string& cn);

struct CertRequest {
  std::string cn;                          // subject CN (a user name for client certs)
  std::vector<std::string> organizations;  // subject O (groups for client certs)
  std::vector<std::string> dns_names;      // SAN DNS entries (server certs)
  std::vector<std::string> ips;            // SAN IP entries (server certs)
  bool server = false;                     // extendedKeyUsage serverAuth
  bool client = false;                     // extendedKeyUsage clientAuth
};
// A leaf certificate for `req`, signed by `ca`, valid from an hour ago for ten years.
Result<KeyPair> IssueCert(const KeyPair& ca, const CertRequest& req);

// A fresh EC P-256 key: the private key (PKCS#8 PEM) and its public key (PEM), e.g. the
// service-account signing key pair of kube-apiserver.
Result<KeyPair> MakeSigningKey();  // cert_pem holds the PUBLIC key PEM

}  // namespace bulwark::k8s::testing
