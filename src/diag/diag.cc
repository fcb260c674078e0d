// The node self-tests, their runner and the verdict (diag.h).
#include "diag/diag.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/run.h"
#include "gpu/cuda_blas.h"

namespace bulwark::diag {
namespace {

double Since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

std::string Fmt(const char* fmt, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, fmt, v);
  return buf;
}

// A fixed generator: the same inputs on every node, every run.
struct Lcg {
  uint64_t s;
  float Next() {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<float>(static_cast<double>(s >> 40) / static_cast<double>(1ull << 24) * 2.0 -
                              1.0);
  }
};

void Product(const std::vector<float>& a, const std::vector<float>& b, int n,
             std::vector<float>* c) {
  c->assign(static_cast<size_t>(n) * n, 0.0f);
  for (int i = 0; i < n; ++i) {
    for (int k = 0; k < n; ++k) {
      const float aik = a[static_cast<size_t>(i) * n + k];
      for (int j = 0; j < n; ++j) {
        (*c)[static_cast<size_t>(i) * n + j] += aik * b[static_cast<size_t>(k) * n + j];
      }
    }
  }
}

std::string ErrnoText(int e) { return std::strerror(e); }

}  // namespace

Json ToJson(const CheckResult& r) {
  Json j = {{"name", r.name}, {"ok", r.ok}, {"seconds", r.seconds}, {"evidence", r.evidence}};
  if (!r.links.empty()) {
    j["links"] = Json::array();
    for (const LinkSample& s : r.links) j["links"].push_back(ToJson(s));
  }
  return j;
}

Result<CheckResult> CheckResultFromJson(const Json& j) {
  if (!j.is_object()) return InvalidArgument("a check result must be a JSON object");
  CheckResult r;
  for (const char* key : {"name", "evidence"}) {
    if (!j.contains(key) || !j[key].is_string()) {
      return InvalidArgument(std::string("check result: \"") + key + "\" must be a string");
    }
  }
  if (!j.contains("ok") || !j["ok"].is_boolean()) {
    return InvalidArgument("check result: \"ok\" must be true or false");
  }
  if (!j.contains("seconds") || !j["seconds"].is_number()) {
    return InvalidArgument("check result: \"seconds\" must be a number");
  }
  r.name = j["name"];
  r.ok = j["ok"];
  r.seconds = j["seconds"];
  r.evidence = j["evidence"];
  if (j.contains("links")) {
    if (!j["links"].is_array() || j["links"].size() > 3) {
      return InvalidArgument("check result: \"links\" must be an array of at most 3 samples");
    }
    for (const Json& s : j["links"]) {
      BW_ASSIGN_OR_RETURN(LinkSample sample, LinkSampleFromJson(s));
      r.links.push_back(sample);
    }
  }
  return r;
}

namespace {

// The double-precision reference of a * b and each element's float-rounding bound,
// about n * eps * sum |a_ik b_kj|.
struct Reference {
  std::vector<double> value, bound;
};

Reference ReferenceProduct(const std::vector<float>& a, const std::vector<float>& b, int n) {
  Reference ref;
  const size_t nn = static_cast<size_t>(n) * n;
  ref.value.resize(nn);
  ref.bound.resize(nn);
  for (int i = 0; i < n; ++i) {
    for (int j = 0; j < n; ++j) {
      double sum = 0, mag = 0;
      for (int k = 0; k < n; ++k) {
        const double p = static_cast<double>(a[static_cast<size_t>(i) * n + k]) *
                         b[static_cast<size_t>(k) * n + j];
        sum += p;
        mag += std::fabs(p);
      }
      const size_t at = static_cast<size_t>(i) * n + j;
      ref.value[at] = sum;
      ref.bound[at] = 2.0 * n * std::numeric_limits<float>::epsilon() * mag + 1e-30;
    }
  }
  return ref;
}

// One device's verdict on two runs of the same product: within the rounding bound of
// the reference, and bitwise equal to each other.
bool JudgeProducts(const Reference& ref, const std::vector<float>& c1, const std::vector<float>& c2,
                   int n, double product_s, std::string* evidence) {
  double worst = 0, worst_bound = 1;
  for (size_t at = 0; at < ref.value.size(); ++at) {
    const double err = std::fabs(c1[at] - ref.value[at]);
    if (err / ref.bound[at] > worst / worst_bound) {
      worst = err;
      worst_bound = ref.bound[at];
    }
  }
  const bool repeatable =
      c1.size() == c2.size() && std::memcmp(c1.data(), c2.data(), c1.size() * sizeof(float)) == 0;
  const bool accurate = worst <= worst_bound;
  const double gflops = 2.0 * n * n * static_cast<double>(n) / std::max(product_s, 1e-9) / 1e9;
  *evidence = "max error " + Fmt("%.3g", worst) + " (bound " + Fmt("%.3g", worst_bound) + "), " +
              (repeatable ? "bitwise repeatable" : "two runs of the same product differ") + ", " +
              Fmt("%.2f", gflops) + " GFLOP/s";
  if (!accurate) *evidence = "wrong result: " + *evidence;
  return repeatable && accurate;
}

}  // namespace

CheckResult MatmulSelfTest(const MatmulOptions& o) {
  const auto t0 = std::chrono::steady_clock::now();
  const int n = o.n;
  CheckResult r{"matmul", false, 0, ""};
  if (n < 1 || n > 4096) {
    r.evidence = "matrix size " + std::to_string(n) + " is outside 1..4096";
    return r;
  }
  const size_t nn = static_cast<size_t>(n) * n;
  std::vector<float> a(nn), b(nn);
  Lcg g{0x5eed};
  for (float& x : a) x = g.Next();
  for (float& x : b) x = g.Next();
  const Reference ref = ReferenceProduct(a, b, n);
  const std::string size = "n=" + std::to_string(n);

  std::string no_gpu = "no GPU path asked for";
  if (!o.cuda_runtimes.empty() && !o.cublas.empty()) {
    auto cuda = gpu::CudaBlas::Open(o.cuda_runtimes, o.cublas);
    if (cuda.ok()) {
      // Every device, the same inputs and the same judgement as on the CPU; a CUDA error
      // fails the check (a device that cannot run a product is not fit to train on).
      r.ok = true;
      std::string parts;
      for (int d = 0; d < (*cuda)->device_count(); ++d) {
        std::vector<float> c1, c2;
        const auto tm = std::chrono::steady_clock::now();
        Status st = (*cuda)->Product(d, a, b, n, &c1);
        const double product_s = Since(tm);
        if (st.ok()) st = (*cuda)->Product(d, a, b, n, &c2);
        std::string part;
        if (!st.ok()) {
          r.ok = false;
          part = "CUDA failed: " + st.message();
        } else {
          if (o.inject_sdc && d == 0) c2[nn / 2] += 1e-3f;
          r.ok = JudgeProducts(ref, c1, c2, n, product_s, &part) && r.ok;
        }
        parts += (d > 0 ? "; gpu" : "gpu") + std::to_string(d) + ": " + part;
      }
      r.evidence = (*cuda)->libraries() + ", " + size + ", " + parts;
      r.seconds = Since(t0);
      return r;
    }
    if (cuda.status().code() != Code::kUnavailable) {
      // A CUDA install that is there but broken: the node cannot run GPU work.
      r.evidence = "GPU path: " + cuda.status().message();
      r.seconds = Since(t0);
      return r;
    }
    no_gpu = cuda.status().message();
  }
  std::vector<float> c1, c2;
  const auto tm = std::chrono::steady_clock::now();
  Product(a, b, n, &c1);
  const double product_s = Since(tm);
  Product(a, b, n, &c2);
  if (o.inject_sdc) c2[nn / 2] += 1e-3f;
  std::string part;
  r.ok = JudgeProducts(ref, c1, c2, n, product_s, &part);
  r.evidence = "cpu, " + size + ": " + part + " (" + no_gpu + ")";
  r.seconds = Since(t0);
  return r;
}

CheckResult MatmulSelfTest(int n, bool inject_sdc) {
  MatmulOptions o;
  o.n = n;
  o.inject_sdc = inject_sdc;
  o.cuda_runtimes.clear();
  o.cublas.clear();
  return MatmulSelfTest(o);
}

CheckResult DiskSelfTest(const std::string& dir, size_t bytes) {
  const auto t0 = std::chrono::steady_clock::now();
  CheckResult r{"disk:" + dir, false, 0, ""};
  const std::string path = dir + "/.bulwark-diag-" + std::to_string(::getpid());
  auto fail = [&](const std::string& what, int e) {
    r.evidence = what + ": " + ErrnoText(e);
    ::unlink(path.c_str());
    r.seconds = Since(t0);
    return r;
  };
  std::vector<unsigned char> chunk(1 << 20);
  auto pattern = [&](size_t offset) {
    for (size_t i = 0; i < chunk.size(); ++i) {
      chunk[i] = static_cast<unsigned char>((offset + i) * 131 + 7);
    }
  };
  int fd = ::open(path.c_str(), O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0600);
  if (fd < 0) return fail("create " + path, errno);
  const auto tw = std::chrono::steady_clock::now();
  size_t written = 0;
  while (written < bytes) {
    pattern(written);
    const size_t want = std::min(chunk.size(), bytes - written);
    const ssize_t n = ::write(fd, chunk.data(), want);
    if (n <= 0) {
      const int e = n < 0 ? errno : ENOSPC;
      ::close(fd);
      return fail("write " + path + " after " + Fmt("%.1f", written / 1048576.0) + " MiB", e);
    }
    written += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0) {
    const int e = errno;
    ::close(fd);
    return fail("fsync " + path, e);
  }
  if (::close(fd) != 0) return fail("close " + path, errno);
  const double write_s = Since(tw);
  fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return fail("reopen " + path, errno);
  const auto tr = std::chrono::steady_clock::now();
  std::vector<unsigned char> got(chunk.size());
  size_t read = 0;
  while (read < bytes) {
    pattern(read);
    const size_t want = std::min(chunk.size(), bytes - read);
    size_t have = 0;
    while (have < want) {
      const ssize_t n = ::read(fd, got.data() + have, want - have);
      if (n <= 0) {
        const int e = n < 0 ? errno : EIO;
        ::close(fd);
        return fail("read back " + path + " at " + std::to_string(read + have), e);
      }
      have += static_cast<size_t>(n);
    }
    if (std::memcmp(got.data(), chunk.data(), want) != 0) {
      ::close(fd);
      ::unlink(path.c_str());
      r.evidence = "read back different bytes than written at offset ~" + std::to_string(read) +
                   " of " + path + " (silent corruption on this disk)";
      r.seconds = Since(t0);
      return r;
    }
    read += want;
  }
  ::close(fd);
  const double read_s = Since(tr);
  ::unlink(path.c_str());
  const double mib = bytes / 1048576.0;
  r.ok = true;
  r.evidence = Fmt("%.0f", mib) + " MiB written, fsynced and read back: " +
               Fmt("%.0f", mib / std::max(write_s, 1e-9)) + " MiB/s write, " +
               Fmt("%.0f", mib / std::max(read_s, 1e-9)) + " MiB/s read";
  r.seconds = Since(t0);
  return r;
}

std::vector<CheckResult> RunChecks(const std::vector<CheckSpec>& checks, const RunOptions& o) {
  std::vector<CheckResult> out;
  for (const CheckSpec& c : checks) {
    CheckResult r{c.check == "disk" ? "disk:" + c.dir : c.check, false, 0, ""};
    if (o.cancel && o.cancel->load()) {
      r.evidence = "cancelled before it started";
      out.push_back(r);
      continue;
    }
    SpawnOptions so;
    so.argv = o.agent_command.empty() ? std::vector<std::string>{o.agent_binary} : o.agent_command;
    so.argv.insert(so.argv.end(), {"diagnose", "--check", c.check});
    if (c.check == "disk") {
      so.argv.insert(so.argv.end(), {"--dir", c.dir, "--bytes", std::to_string(o.disk_bytes)});
    } else if (c.check == "gpu") {
      so.argv.insert(so.argv.end(), {"--nvml-library", c.dir});
    } else if (c.check == "link") {
      so.argv.insert(so.argv.end(),
                     {"--index", std::to_string(c.link_index), "--peers", c.link_peers, "--session",
                      std::to_string(c.link_session), "--bytes", std::to_string(o.link_bytes),
                      "--budget", Fmt("%g", c.budget_s)});
      if (c.link_throttle_mib_s > 0) {
        so.argv.insert(so.argv.end(), {"--throttle-mibps", Fmt("%g", c.link_throttle_mib_s)});
      }
      so.control_fd = c.link_listen_fd;
    } else {
      so.argv.insert(so.argv.end(), {"--n", std::to_string(o.matmul_n), "--cuda-runtime",
                                     c.cuda_runtime, "--cublas", c.cublas});
    }
    if (!c.inject.empty()) so.argv.insert(so.argv.end(), {"--inject", c.inject});
    so.env = CurrentEnv();
    const double t0 = SystemClock::Get()->NowMono();
    auto run = RunToEnd(so, c.budget_s);
    r.seconds = SystemClock::Get()->NowMono() - t0;
    if (!run.ok()) {
      r.evidence = "could not start " + so.argv[0] + ": " + run.status().message();
      out.push_back(r);
      continue;
    }
    if (run->timed_out) {
      r.evidence = "did not finish within its budget of " + Fmt("%g", c.budget_s) +
                   " s (killed): a hung check is a failed check";
      out.push_back(r);
      continue;
    }
    std::string text = run->output;
    const ExitInfo* exit = &run->exit;
    while (!text.empty() && text.back() == '\n') text.pop_back();
    const std::string last =
        text.substr(text.rfind('\n') == std::string::npos ? 0 : text.rfind('\n') + 1);
    auto parsed = CheckResultFromJson(Json::parse(last, nullptr, false));
    if (!exit->ok() || !parsed.ok()) {
      r.evidence = "the check crashed (" + exit->Describe() + "): " + text.substr(0, 300);
      out.push_back(r);
      continue;
    }
    out.push_back(*parsed);
  }
  return out;
}

Verdict Judge(const std::vector<CheckResult>& results) {
  Verdict v;
  std::string bad, good;
  for (const CheckResult& r : results) {
    if (r.ok) {
      good += (good.empty() ? "" : "; ") + r.name;
    } else {
      v.healthy = false;
      v.failed.push_back(r.name);
      bad += (bad.empty() ? "" : "; ") + r.name + ": " + r.evidence;
    }
  }
  if (results.empty()) {
    v.summary = "healthy: no check was run";
  } else if (v.healthy) {
    v.summary = "healthy: " + good + " passed";
  } else {
    v.summary = "unhealthy: " + bad;
  }
  return v;
}

}  // namespace bulwark::diag
