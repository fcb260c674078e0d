// kubeconfig files and the in-cluster service-account configuration.
//
// Supported: clusters[].cluster.{server, certificate-authority[-data],
// insecure-skip-tls-verify}, users[].user.{client-certificate[-data],
// client-key[-data], token, tokenFile}, contexts[].context.{cluster, user,
// namespace}, current-context. Relative file paths resolve against the kubeconfig's
// directory. exec, auth-provider and basic auth are refused with the fix. A server
// without a scheme ("10.0.0.1:6443") gets the one client-go gives it: https:// when the
// cluster has a CA or skips verification or the user has a client certificate, else
// http://.
#include <yaml-cpp/yaml.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "k8s/internal.h"

namespace bulwark::k8s {

namespace {

namespace fs = std::filesystem;

Result<std::string> ReadWholeFile(const std::string& path, const std::string& what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return NotFound(what + ": cannot read '" + path +
                    "'; check that the file exists and is readable");
  }
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string TrimRight(std::string s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
  return s;
}

class KubeconfigLoader {
 public:
  explicit KubeconfigLoader(std::string path)
      : path_(std::move(path)), dir_(fs::path(path_).parent_path().string()) {}

  Result<ClientConfig> Load(const std::string& context) {
    BW_ASSIGN_OR_RETURN(std::string text, ReadWholeFile(path_, "kubeconfig"));
    YAML::Node root;
    try {
      root = YAML::Load(text);
    } catch (const YAML::Exception& e) {
      return Error("", std::string("is not valid YAML: ") + e.what(), "fix the file's syntax");
    }
    if (!root.IsMap()) return Error("", "is not a YAML mapping", "pass a kubeconfig file");
    try {
      return FromRoot(root, context);
    } catch (const YAML::Exception& e) {  // a node of an unexpected shape
      return Error("", std::string("unexpected structure: ") + e.what(),
                   "compare with `kubectl config view`");
    }
  }

 private:
  Status Error(const std::string& field, const std::string& problem, const std::string& fix) const {
    std::string msg = "kubeconfig " + path_;
    if (!field.empty()) msg += ": " + field;
    return InvalidArgument(msg + " " + problem + "; " + fix);
  }

  Result<std::string> Str(const YAML::Node& n, const std::string& key,
                          const std::string& field) const {
    YAML::Node v = n[key];
    if (!v.IsDefined() || v.IsNull()) return std::string();
    if (!v.IsScalar()) return Error(field + "." + key, "is not a string", "write a plain string");
    return v.as<std::string>();
  }

  // The `entry_key` map of the list entry named `name` in root[list].
  Result<YAML::Node> Named(const YAML::Node& root, const std::string& list, const std::string& name,
                           const std::string& entry_key, const std::string& referrer) const {
    YAML::Node l = root[list];
    if (l.IsDefined() && !l.IsNull() && !l.IsSequence()) {
      return Error(list, "is not a list",
                   "write it as a list of entries, each `- name: NAME` with its `" + entry_key +
                       ":` mapping (`kubectl config view` shows the layout)");
    }
    std::string have;
    if (l.IsDefined() && l.IsSequence()) {
      for (const YAML::Node& e : l) {
        if (!e.IsMap() || !e["name"].IsScalar()) continue;
        const std::string n = e["name"].as<std::string>();
        if (n == name) {
          YAML::Node body = e[entry_key];
          if (!body.IsDefined() || !body.IsMap()) {
            return Error(list + "[name=" + name + "]." + entry_key, "is missing or not a mapping",
                         "add the " + entry_key + " entry");
          }
          return body;
        }
        have += (have.empty() ? "" : ", ") + n;
      }
    }
    return Error(referrer, "names " + list + " entry '" + name + "', which does not exist",
                 "use one of: " + (have.empty() ? std::string("(none)") : have));
  }

  std::string Resolve(const std::string& p) const {
    if (p.empty() || fs::path(p).is_absolute() || dir_.empty()) return p;
    return (fs::path(dir_) / p).string();
  }

  // PEM from `<key>-data` (base64) or the file `<key>`.
  Result<std::string> Pem(const YAML::Node& n, const std::string& key,
                          const std::string& field) const {
    BW_ASSIGN_OR_RETURN(std::string data, Str(n, key + "-data", field));
    if (!data.empty()) {
      auto pem = internal::Base64Decode(data);
      if (!pem)
        return Error(field + "." + key + "-data", "is not valid base64", "paste `base64 -w0 FILE`");
      return *pem;
    }
    BW_ASSIGN_OR_RETURN(std::string file, Str(n, key, field));
    if (file.empty()) return std::string();
    return ReadWholeFile(Resolve(file), "kubeconfig " + path_ + ": " + field + "." + key);
  }

  Result<ClientConfig> FromRoot(const YAML::Node& root, const std::string& context) {
    ClientConfig cfg;
    std::string ctx_name = context;
    if (ctx_name.empty()) {
      BW_ASSIGN_OR_RETURN(ctx_name, Str(root, "current-context", ""));
      if (ctx_name.empty()) {
        return Error("current-context", "is empty and no context was given",
                     "pass a context name or run `kubectl config use-context NAME`");
      }
    }
    const std::string ctx_field = "contexts[name=" + ctx_name + "].context";
    BW_ASSIGN_OR_RETURN(YAML::Node ctx, Named(root, "contexts", ctx_name, "context",
                                              context.empty() ? "current-context" : "context"));
    BW_ASSIGN_OR_RETURN(std::string cluster_name, Str(ctx, "cluster", ctx_field));
    BW_ASSIGN_OR_RETURN(std::string user_name, Str(ctx, "user", ctx_field));
    BW_ASSIGN_OR_RETURN(std::string ns, Str(ctx, "namespace", ctx_field));
    if (!ns.empty()) cfg.namespace_ = ns;
    if (cluster_name.empty()) return Error(ctx_field + ".cluster", "is empty", "name a cluster");

    const std::string cl_field = "clusters[name=" + cluster_name + "].cluster";
    BW_ASSIGN_OR_RETURN(YAML::Node cl,
                        Named(root, "clusters", cluster_name, "cluster", ctx_field + ".cluster"));
    BW_ASSIGN_OR_RETURN(cfg.server, Str(cl, "server", cl_field));
    if (cfg.server.empty()) {
      return Error(cl_field + ".server", "is empty",
                   "set it to https://HOST:PORT of the API server");
    }
    for (char c : cfg.server) {
      const auto u = static_cast<unsigned char>(c);
      if (u <= ' ' || u >= 0x7f) {
        return Error(cl_field + ".server", "holds a space, a control or a non-ASCII character",
                     "set it to https://HOST:PORT of the API server");
      }
    }
    const size_t scheme_end = cfg.server.find("://");
    if (scheme_end != std::string::npos) {
      const std::string scheme = cfg.server.substr(0, scheme_end);
      if (scheme != "https" && scheme != "http") {
        return Error(cl_field + ".server", "is '" + cfg.server + "': scheme " + scheme + "://",
                     "use https://HOST:PORT (or http:// for an insecure port)");
      }
    }
    BW_ASSIGN_OR_RETURN(cfg.ca_pem, Pem(cl, "certificate-authority", cl_field));
    BW_ASSIGN_OR_RETURN(std::string insecure, Str(cl, "insecure-skip-tls-verify", cl_field));
    if (!insecure.empty() && insecure != "true" && insecure != "false") {
      return Error(cl_field + ".insecure-skip-tls-verify", "is '" + insecure + "'",
                   "write true or false");
    }
    cfg.insecure_skip_tls_verify = insecure == "true";

    if (user_name.empty()) return DefaultScheme(std::move(cfg));  // anonymous
    const std::string u_field = "users[name=" + user_name + "].user";
    BW_ASSIGN_OR_RETURN(YAML::Node u, Named(root, "users", user_name, "user", ctx_field + ".user"));
    for (const char* unsupported : {"exec", "auth-provider", "username", "password"}) {
      if (u[unsupported].IsDefined() && !u[unsupported].IsNull()) {
        return Error(u_field + "." + unsupported, "is not supported by Bulwark's client",
                     "give this user a token, tokenFile or client-certificate/client-key (e.g. a "
                     "service-account token from `kubectl create token`)");
      }
    }
    BW_ASSIGN_OR_RETURN(cfg.client_cert_pem, Pem(u, "client-certificate", u_field));
    BW_ASSIGN_OR_RETURN(cfg.client_key_pem, Pem(u, "client-key", u_field));
    if (cfg.client_cert_pem.empty() != cfg.client_key_pem.empty()) {
      return Error(u_field, "has only one of client-certificate and client-key",
                   "give both (or their -data forms)");
    }
    BW_ASSIGN_OR_RETURN(cfg.token, Str(u, "token", u_field));
    BW_ASSIGN_OR_RETURN(std::string token_file, Str(u, "tokenFile", u_field));
    if (!token_file.empty()) {
      cfg.token_file = Resolve(token_file);
      if (cfg.token.empty()) {
        BW_ASSIGN_OR_RETURN(
            std::string t,
            ReadWholeFile(cfg.token_file, "kubeconfig " + path_ + ": " + u_field + ".tokenFile"));
        cfg.token = TrimRight(t);
      }
    }
    return DefaultScheme(std::move(cfg));
  }

  // client-go's scheme for a server given as HOST:PORT (rest.DefaultServerURL).
  static ClientConfig DefaultScheme(ClientConfig cfg) {
    if (cfg.server.find("://") != std::string::npos) return cfg;
    const bool tls =
        !cfg.ca_pem.empty() || cfg.insecure_skip_tls_verify || !cfg.client_cert_pem.empty();
    cfg.server = (tls ? "https://" : "http://") + cfg.server;
    return cfg;
  }

  std::string path_;
  std::string dir_;
};

}  // namespace

Result<ClientConfig> LoadKubeConfig(const std::string& path, const std::string& context) {
  return KubeconfigLoader(path).Load(context);
}

Result<ClientConfig> InClusterConfig(const std::string& sa_dir) {
  const char* host = std::getenv("KUBERNETES_SERVICE_HOST");
  const char* port = std::getenv("KUBERNETES_SERVICE_PORT");
  if (host == nullptr || *host == '\0' || port == nullptr || *port == '\0') {
    return FailedPrecondition(
        "not running in a Kubernetes pod: KUBERNETES_SERVICE_HOST/KUBERNETES_SERVICE_PORT are "
        "unset; pass a kubeconfig instead");
  }
  ClientConfig cfg;
  std::string h = host;
  if (h.find(':') != std::string::npos) h = "[" + h + "]";  // IPv6
  cfg.server = "https://" + h + ":" + port;
  cfg.token_file = sa_dir + "/token";
  BW_ASSIGN_OR_RETURN(std::string token, ReadWholeFile(cfg.token_file, "service-account token"));
  cfg.token = TrimRight(token);
  BW_ASSIGN_OR_RETURN(cfg.ca_pem, ReadWholeFile(sa_dir + "/ca.crt", "service-account CA"));
  auto ns = ReadWholeFile(sa_dir + "/namespace", "service-account namespace");
  if (ns.ok() && !TrimRight(*ns).empty()) cfg.namespace_ = TrimRight(*ns);
  return cfg;
}

}  // namespace bulwark::k8s
