// CUDA runtime + cuBLAS, resolved at run time (cuda_blas.h).
#include "gpu/cuda_blas.h"

#include <dlfcn.h>

#include <utility>

#include "gpu/cuda_abi.h"

namespace bulwark::gpu {

// Owns both dlopen handles and the cuBLAS handle of each device used so far; the
// destructor releases them in reverse order.
struct CudaBlas::Impl {
  void* runtime = nullptr;
  void* blas = nullptr;
  std::string libraries;
  int devices = 0;
  std::vector<cublasHandle_t> handles;  // by device, created on first use

  decltype(&::cudaGetDeviceCount) get_device_count = nullptr;
  decltype(&::cudaSetDevice) set_device = nullptr;
  decltype(&::cudaMalloc) malloc = nullptr;
  decltype(&::cudaFree) free = nullptr;
  decltype(&::cudaMemcpy) memcpy = nullptr;
  decltype(&::cudaDeviceSynchronize) synchronize = nullptr;
  decltype(&::cudaGetErrorString) error_string = nullptr;
  decltype(&::cublasCreate_v2) create = nullptr;
  decltype(&::cublasDestroy_v2) destroy = nullptr;
  decltype(&::cublasSetMathMode) set_math_mode = nullptr;
  decltype(&::cublasSgemm_v2) sgemm = nullptr;

  ~Impl() {
    for (size_t d = 0; d < handles.size(); ++d) {
      if (handles[d] != nullptr && set_device(static_cast<int>(d)) == cudaSuccess) {
        destroy(handles[d]);
      }
    }
    if (blas != nullptr) dlclose(blas);
    if (runtime != nullptr) dlclose(runtime);
  }

  std::string Error(const char* what, cudaError_t rc) const {
    const char* s = error_string(rc);
    return std::string(what) + ": " + (s != nullptr ? s : "unknown error") + " (CUDA error " +
           std::to_string(rc) + ")";
  }
};

namespace {

std::string FirstLine(const char* s) {
  std::string out = s != nullptr ? s : "";
  const size_t nl = out.find('\n');
  return nl == std::string::npos ? out : out.substr(0, nl);
}

// The first library of `names` that loads, and its name; Unavailable naming every
// attempt when none does.
Result<std::pair<void*, std::string>> LoadFirst(const std::vector<std::string>& names,
                                                const char* what) {
  std::string tried;
  for (const std::string& name : names) {
    dlerror();
    void* lib = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (lib != nullptr) return std::make_pair(lib, name);
    const std::string why = FirstLine(dlerror());
    if (!tried.empty()) tried += "; ";
    tried +=
        why.rfind(name + ": cannot open shared object file", 0) == 0 ? name + " not found" : why;
  }
  return Unavailable(std::string("no ") + what + " (" + (tried.empty() ? "none named" : tried) +
                     ")");
}

template <typename F>
Status CudaResolve(void* lib, const std::string& name, const char* symbol, F* fn) {
  void* p = dlsym(lib, symbol);
  if (p == nullptr) {
    return FailedPrecondition(name + " has no symbol " + symbol +
                              " (not a CUDA 11 or 12 library?)");
  }
  *fn = reinterpret_cast<F>(p);
  return Status::Ok();
}

}  // namespace

const std::vector<std::string>& CudaBlas::DefaultRuntimes() {
  static const std::vector<std::string> kNames = {"libcudart.so.12", "libcudart.so.11.0",
                                                  "libcudart.so"};
  return kNames;
}

const std::vector<std::string>& CudaBlas::DefaultBlas() {
  static const std::vector<std::string> kNames = {"libcublas.so.12", "libcublas.so.11",
                                                  "libcublas.so"};
  return kNames;
}

CudaBlas::CudaBlas(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CudaBlas::~CudaBlas() = default;
int CudaBlas::device_count() const { return impl_->devices; }
const std::string& CudaBlas::libraries() const { return impl_->libraries; }

Result<std::unique_ptr<CudaBlas>> CudaBlas::Open(const std::vector<std::string>& runtimes,
                                                 const std::vector<std::string>& blas) {
  auto impl = std::make_unique<Impl>();
  auto rt = LoadFirst(runtimes, "CUDA runtime");
  if (!rt.ok()) return rt.status();
  impl->runtime = rt->first;
  const std::string rt_name = rt->second;
  auto bl = LoadFirst(blas, "cuBLAS");
  if (!bl.ok()) return bl.status();
  impl->blas = bl->first;
  const std::string bl_name = bl->second;
  impl->libraries = rt_name + " + " + bl_name;
  void* r = impl->runtime;
  BW_RETURN_IF_ERROR(CudaResolve(r, rt_name, "cudaGetErrorString", &impl->error_string));
  BW_RETURN_IF_ERROR(CudaResolve(r, rt_name, "cudaGetDeviceCount", &impl->get_device_count));
  BW_RETURN_IF_ERROR(CudaResolve(r, rt_name, "cudaSetDevice", &impl->set_device));
  BW_RETURN_IF_ERROR(CudaResolve(r, rt_name, "cudaMalloc", &impl->malloc));
  BW_RETURN_IF_ERROR(CudaResolve(r, rt_name, "cudaFree", &impl->free));
  BW_RETURN_IF_ERROR(CudaResolve(r, rt_name, "cudaMemcpy", &impl->memcpy));
  BW_RETURN_IF_ERROR(CudaResolve(r, rt_name, "cudaDeviceSynchronize", &impl->synchronize));
  void* b = impl->blas;
  BW_RETURN_IF_ERROR(CudaResolve(b, bl_name, "cublasCreate_v2", &impl->create));
  BW_RETURN_IF_ERROR(CudaResolve(b, bl_name, "cublasDestroy_v2", &impl->destroy));
  BW_RETURN_IF_ERROR(CudaResolve(b, bl_name, "cublasSetMathMode", &impl->set_math_mode));
  BW_RETURN_IF_ERROR(CudaResolve(b, bl_name, "cublasSgemm_v2", &impl->sgemm));
  int count = 0;
  const cudaError_t rc = impl->get_device_count(&count);
  if (rc == cudaErrorNoDevice || rc == cudaErrorInsufficientDriver) {
    return Unavailable(impl->Error("no usable GPU", rc));
  }
  if (rc != cudaSuccess) return Internal(impl->Error("cudaGetDeviceCount", rc));
  if (count <= 0) return Unavailable("no GPU: " + rt_name + " counts 0 devices");
  impl->devices = count;
  impl->handles.assign(static_cast<size_t>(count), nullptr);
  return std::unique_ptr<CudaBlas>(new CudaBlas(std::move(impl)));
}

Status CudaBlas::Product(int device, const std::vector<float>& a, const std::vector<float>& b,
                         int n, std::vector<float>* c) {
  Impl& m = *impl_;
  const size_t nn = static_cast<size_t>(n) * static_cast<size_t>(n);
  if (device < 0 || device >= m.devices || n < 1 || a.size() != nn || b.size() != nn) {
    return InvalidArgument("Product: device " + std::to_string(device) + " of " +
                           std::to_string(m.devices) + ", n=" + std::to_string(n) + ", inputs of " +
                           std::to_string(a.size()) + " and " + std::to_string(b.size()) +
                           " elements");
  }
  cudaError_t rc = m.set_device(device);
  if (rc != cudaSuccess) return Internal(m.Error("cudaSetDevice", rc));
  cublasHandle_t& h = m.handles[static_cast<size_t>(device)];
  if (h == nullptr) {
    const cublasStatus_t st = m.create(&h);
    if (st != CUBLAS_STATUS_SUCCESS) {
      h = nullptr;
      return Internal("cublasCreate on GPU " + std::to_string(device) + ": cuBLAS status " +
                      std::to_string(st));
    }
    // cuBLAS before 11 has no pedantic mode; its default is plain fp32 anyway.
    if (m.set_math_mode(h, CUBLAS_PEDANTIC_MATH) != CUBLAS_STATUS_SUCCESS) {
      m.set_math_mode(h, CUBLAS_DEFAULT_MATH);
    }
  }
  const size_t bytes = nn * sizeof(float);
  void* buf[3] = {nullptr, nullptr, nullptr};
  auto release = [&] {
    for (void*& p : buf) {
      if (p != nullptr) m.free(p);
      p = nullptr;
    }
  };
  for (void*& p : buf) {
    rc = m.malloc(&p, bytes);
    if (rc != cudaSuccess) {
      p = nullptr;
      release();
      return Internal(m.Error("cudaMalloc", rc));
    }
  }
  Status st = Status::Ok();
  if ((rc = m.memcpy(buf[0], a.data(), bytes, cudaMemcpyHostToDevice)) != cudaSuccess ||
      (rc = m.memcpy(buf[1], b.data(), bytes, cudaMemcpyHostToDevice)) != cudaSuccess) {
    st = Internal(m.Error("cudaMemcpy to the device", rc));
  }
  if (st.ok()) {
    // cuBLAS is column-major: a row-major matrix read column-major is its transpose, and
    // (A B)^T = B^T A^T, so B "times" A in cuBLAS's terms leaves A B row-major in C.
    const float one = 1.0f, zero = 0.0f;
    const cublasStatus_t bs =
        m.sgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, static_cast<const float*>(buf[1]), n,
                static_cast<const float*>(buf[0]), n, &zero, static_cast<float*>(buf[2]), n);
    if (bs != CUBLAS_STATUS_SUCCESS) {
      st = Internal("cublasSgemm on GPU " + std::to_string(device) + ": cuBLAS status " +
                    std::to_string(bs));
    } else if ((rc = m.synchronize()) != cudaSuccess) {
      st = Internal(m.Error("cudaDeviceSynchronize", rc));
    }
  }
  if (st.ok()) {
    c->assign(nn, 0.0f);
    rc = m.memcpy(c->data(), buf[2], bytes, cudaMemcpyDeviceToHost);
    if (rc != cudaSuccess) st = Internal(m.Error("cudaMemcpy from the device", rc));
  }
  release();
  return st;
}

}  // namespace bulwark::gpu
