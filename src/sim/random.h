// Random variates for the simulator with our own inverse-CDF code on top of
// std::mt19937_64 (whose output sequence the C++ standard fixes), so equal seeds give
// equal draws on every standard library (std::*_distribution outputs are
// implementation-defined). Internal to src/sim. Thread-compatible.
#pragma once

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

namespace bulwark::sim {

class Rng {
 public:
  explicit Rng(uint64_t seed) : gen_(seed) {}
  // Uniform in [0, 1) with 53 random bits.
  double Uniform() { return static_cast<double>(gen_() >> 11) * 0x1.0p-53; }
  // Exponential with the given mean (> 0): -mean * ln(1 - U).
  double Exponential(double mean) { return -mean * std::log1p(-Uniform()); }
  // Weibull with shape k > 0 and scale lambda: lambda * (-ln(1 - U))^(1/k).
  double Weibull(double shape, double scale) {
    return scale * std::pow(-std::log1p(-Uniform()), 1.0 / shape);
  }
  // Standard normal by Box-Muller (one of the pair; the other is discarded).
  double Normal() {
    const double u1 = 1.0 - Uniform();  // (0, 1]
    const double u2 = Uniform();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  }
  // Index drawn with probability weights[i] / sum (weights >= 0, sum > 0).
  int Pick(const std::vector<double>& weights) {
    double sum = 0;
    for (double w : weights) sum += w;
    double x = Uniform() * sum;
    for (size_t i = 0; i < weights.size(); ++i) {
      if (x < weights[i]) return static_cast<int>(i);
      x -= weights[i];
    }
    return static_cast<int>(weights.size()) - 1;
  }

 private:
  std::mt19937_64 gen_;
};

// Weibull scale that gives the mean `mean` for shape k: mean / Gamma(1 + 1/k).
inline double WeibullScaleForMean(double shape, double mean) {
  return mean / std::tgamma(1.0 + 1.0 / shape);
}

}  // namespace bulwark::sim
