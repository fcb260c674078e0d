#include "metrics/mfu.h"

#include <cctype>
#include <cmath>
#include <sstream>

namespace bulwark::metrics {
namespace {

struct Row {
  const char* match;    // every space-separated word must occur in the normalised name
  const char* exclude;  // none of these words may occur ("" = none)
  const char* label;
  double bf16, fp8, tf32, fp32;  // dense; 0 = no such mode
};

// Most specific rows first. NVIDIA data sheets (dense, without sparsity); AMD MI300X.
constexpr Row kRows[] = {
    {"gb200", "", "GB200", 2.5e15, 5e15, 1.25e15, 0},
    {"b200", "gb200", "B200", 2.25e15, 4.5e15, 1.1e15, 0},
    {"h200", "", "H200", 989e12, 1979e12, 494e12, 67e12},
    {"h100 nvl", "", "H100 NVL", 835e12, 1671e12, 418e12, 60e12},
    {"h100 pcie", "", "H100 PCIe", 756e12, 1513e12, 378e12, 51e12},
    {"h100", "pcie nvl", "H100 SXM", 989e12, 1979e12, 494e12, 67e12},
    {"h800", "", "H800", 989e12, 1979e12, 494e12, 67e12},
    {"a100", "", "A100", 312e12, 0, 156e12, 19.5e12},
    {"a800", "", "A800", 312e12, 0, 156e12, 19.5e12},
    {"l40s", "", "L40S", 362e12, 733e12, 183e12, 91.6e12},
    {"a10g", "", "A10G", 70e12, 0, 35e12, 31.2e12},
    {"l4", "l40 l40s", "L4", 121e12, 242e12, 60e12, 30.3e12},
    {"v100", "", "V100", 125e12, 0, 0, 15.7e12},
    {"mi300x", "", "MI300X", 1307e12, 2615e12, 654e12, 163e12},
};

// Lower case; every non-alphanumeric byte becomes a space; "-sxm4-" splits into words.
std::string Normalise(std::string_view s) {
  std::string out = " ";
  for (const char c : s) {
    out += std::isalnum(static_cast<unsigned char>(c))
               ? static_cast<char>(std::tolower(static_cast<unsigned char>(c)))
               : ' ';
  }
  return out + " ";
}

bool HasWord(const std::string& name, std::string_view word) {
  return name.find(" " + std::string(word) + " ") != std::string::npos ||
         // "h100" inside "h100sxm5": a model number directly followed by letters/digits
         name.find(" " + std::string(word)) != std::string::npos;
}

bool Matches(const std::string& name, const Row& r) {
  std::istringstream m(r.match), x(r.exclude);
  for (std::string w; m >> w;) {
    if (!HasWord(name, w)) return false;
  }
  for (std::string w; x >> w;) {
    if (name.find(" " + w + " ") != std::string::npos) return false;
  }
  return true;
}

}  // namespace

double PeakFlops(std::string_view gpu_name, std::string_view dtype) {
  const std::string name = Normalise(gpu_name);
  const std::string d = Normalise(dtype.empty() ? "bf16" : dtype);
  for (const Row& r : kRows) {
    if (!Matches(name, r)) continue;
    if (d == " bf16 " || d == " fp16 " || d == " bfloat16 " || d == " float16 ") return r.bf16;
    if (d == " fp8 ") return r.fp8;
    if (d == " tf32 ") return r.tf32;
    if (d == " fp32 " || d == " float32 ") return r.fp32;
    return 0;
  }
  return 0;
}

std::string PeakFlopsTable() {
  std::ostringstream o;
  for (const Row& r : kRows) {
    if (&r != kRows) o << ", ";
    o << r.label << " bf16 " << r.bf16;
  }
  return o.str();
}

double Mfu(double flops_per_token, double tokens_per_s, int devices, double peak_flops) {
  if (!(flops_per_token > 0) || !(tokens_per_s > 0) || devices <= 0 || !(peak_flops > 0) ||
      !std::isfinite(flops_per_token * tokens_per_s / peak_flops)) {
    return 0;
  }
  return flops_per_token * tokens_per_s / (devices * peak_flops);
}

}  // namespace bulwark::metrics
