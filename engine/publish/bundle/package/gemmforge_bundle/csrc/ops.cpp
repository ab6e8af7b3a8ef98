// torch.ops.gemmforge.hgemm and hgemm_linear, registered from C++ so that an eager call costs the
// dispatcher's host time and no Python: the dispatch table (per (N, K, layout), M ranges each
// served by a kernel library with gemmforge's C ABI or by a pinned cuBLASLt algorithm through
// the bundle's shim) is handed over once by gemmforge_bundle._ops (gemmforge::_add_entry).
// Anything no entry can take goes to torch.matmul: another dtype, stride, alignment, M, a GPU
// the entry was not built or recorded for, an older driver, a library that does not load, a
// kernel whose launch says it cannot run on this GPU (remembered per entry and device: later
// calls do not try again), a pinned algorithm cuBLASLt rejects (remembered per M); one warning
// per process, then silent.
//
// Output and workspace come from PyTorch's caching allocator and nothing synchronises, so the
// ops work under CUDA-graph capture once each shape has been called (first calls load libraries
// and prepare cuBLASLt plans: host work only). Gradients go through torch.matmul; the fake
// (meta) kernels that torch.compile needs are registered from Python.
#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/GradMode.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <torch/autograd.h>
#include <torch/library.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "launch_refusal.h"

namespace {

using gemmforge_ops::kMaxDevices;

using LaunchFn = int (*)(const void*, const void*, void*, int, int, int, void*, void*);
using WorkspaceFn = size_t (*)(int, int, int);
using LtVersionFn = size_t (*)();
using LtPrepareFn = int (*)(int, int, int, int, const int64_t*, int, size_t*);
using LtRunFn = int (*)(int, const void*, const void*, void*, void*, void*);

constexpr int64_t kAlignment = 16;  // the kernels load operands with 16-byte vector copies

struct Resolved {
  std::string why_not;  // empty: usable
  LaunchFn launch = nullptr;
  WorkspaceFn workspace = nullptr;
  LtPrepareFn prepare = nullptr;
  LtRunFn run = nullptr;
};

struct Entry {
  int64_t lo = 0, hi = 0, m = 0;
  std::string name, library, archs;  // archs: comma-separated (sm_90a,sm_80)
  int64_t built_cuda = 0;            // the CUDA the library was built with (1000*major+10*minor)
  std::vector<int64_t> algo;         // empty: a kernel library; else the pinned cuBLASLt config
  std::string lt_gpu;                // the GPU and cuBLASLt version the algorithm was pinned on
  int64_t lt_version = 0;
  std::once_flag resolved_once[kMaxDevices];
  Resolved resolved[kMaxDevices];
  gemmforge_ops::Refusals refusals;  // devices whose launch said the kernel cannot run there
  std::mutex mutex;  // guards per_m
  std::unordered_map<int64_t, std::pair<int, size_t>> per_m;  // M -> (plan or 0, workspace)
};

using Key = std::tuple<int64_t, int64_t, int64_t>;  // N, K, layout (0 NN, 1 TN)
// Filled by gemmforge::_add_entry when the package is imported, before any call.
std::map<Key, std::vector<std::unique_ptr<Entry>>> g_table;
std::mutex g_table_mutex;
std::atomic<bool> g_warned{false};

void fallback_warning(const std::string& reason) {
  if (!g_warned.exchange(true)) {
    TORCH_WARN("gemmforge: falling back to torch.matmul (", reason,
               "); further fallbacks are silent");
  }
}

bool arch_runs(const std::string& arch, int major, int minor) {
  std::string number = arch.rfind("sm_", 0) == 0 ? arch.substr(3) : arch;
  const bool specific = !number.empty() && number.back() == 'a';
  while (!number.empty() && (number.back() == 'a' || number.back() == 'f')) number.pop_back();
  if (number.size() < 2 || !std::all_of(number.begin(), number.end(), ::isdigit)) return false;
  const int want_major = std::stoi(number.substr(0, number.size() - 1));
  const int want_minor = number.back() - '0';
  if (specific) return major == want_major && minor == want_minor;
  return major == want_major && minor >= want_minor;
}

std::string cannot_run(const Entry& e, const cudaDeviceProp& props) {
  if (!e.archs.empty()) {
    bool any = false;
    std::stringstream list(e.archs);
    for (std::string arch; std::getline(list, arch, ',');) {
      any = any || arch_runs(arch, props.major, props.minor);
    }
    if (!any) {
      return "built for " + e.archs + ", this GPU is sm_" + std::to_string(props.major) +
             std::to_string(props.minor);
    }
  }
  int driver = 0;
  if (e.built_cuda > 0 && cudaDriverGetVersion(&driver) == cudaSuccess && driver < e.built_cuda) {
    return "built with CUDA " + std::to_string(e.built_cuda / 1000) + "." +
           std::to_string(e.built_cuda % 1000 / 10) + ", the driver supports CUDA " +
           std::to_string(driver / 1000) + "." + std::to_string(driver % 1000 / 10);
  }
  if (!e.algo.empty() && !e.lt_gpu.empty() && e.lt_gpu != props.name) {
    return "cuBLASLt algorithm pinned on " + e.lt_gpu + ", this GPU is " + props.name;
  }
  return "";
}

Resolved resolve(const Entry& e, int device) {
  Resolved r;
  cudaDeviceProp props;
  if (cudaGetDeviceProperties(&props, device) != cudaSuccess) {
    r.why_not = "cannot read the properties of CUDA device " + std::to_string(device);
    return r;
  }
  r.why_not = cannot_run(e, props);
  if (!r.why_not.empty()) return r;
  void* lib = dlopen(e.library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    r.why_not = e.name + " is not built or does not load: run `python -m gemmforge_bundle.build`";
    return r;
  }
  if (e.algo.empty()) {
    r.launch = reinterpret_cast<LaunchFn>(dlsym(lib, "gemmforge_hgemm"));
    r.workspace = reinterpret_cast<WorkspaceFn>(dlsym(lib, "gemmforge_workspace_size"));
    if (!r.launch || !r.workspace) r.why_not = e.name + " lacks gemmforge's C entry points";
    return r;
  }
  auto version = reinterpret_cast<LtVersionFn>(dlsym(lib, "gemmforge_lt_version"));
  r.prepare = reinterpret_cast<LtPrepareFn>(dlsym(lib, "gemmforge_lt_prepare"));
  r.run = reinterpret_cast<LtRunFn>(dlsym(lib, "gemmforge_lt_hgemm"));
  if (!version || !r.prepare || !r.run) {
    r.why_not = "the cuBLASLt shim lacks its entry points";
  } else if (e.lt_version > 0 && int64_t(version()) != e.lt_version) {
    r.why_not = "cuBLASLt algorithm pinned under cuBLASLt " + std::to_string(e.lt_version) +
                ", this is " + std::to_string(version());
  }
  return r;
}

const Resolved& resolved(Entry& e, int device) {
  std::call_once(e.resolved_once[device], [&] {
    e.resolved[device] = resolve(e, device);
    if (!e.resolved[device].why_not.empty()) {
      fallback_warning(e.name + ": " + e.resolved[device].why_not);
    }
  });
  return e.resolved[device];
}

Entry* entry_for(int64_t m, int64_t n, int64_t k, int64_t layout) {
  auto found = g_table.find(Key{n, k, layout});
  if (found == g_table.end()) return nullptr;
  const auto& entries = found->second;  // sorted by lo, disjoint
  auto it = std::upper_bound(entries.begin(), entries.end(), m,
                             [](int64_t v, const std::unique_ptr<Entry>& e) { return v < e->lo; });
  if (it == entries.begin()) return nullptr;
  Entry* e = std::prev(it)->get();
  return m <= e->hi ? e : nullptr;
}

bool takes(const at::Tensor& t) {
  return t.scalar_type() == at::kHalf && t.dim() == 2 && t.is_contiguous() &&
         reinterpret_cast<uintptr_t>(t.data_ptr()) % kAlignment == 0;
}

// C = A.B with B given as a kernel takes it, `operand`: B (K x N) row-major for layout 0 (NN),
// B^T (N x K) row-major for layout 1 (TN); nullopt when torch.matmul must do it.
std::optional<at::Tensor> bundle_run(const at::Tensor& a, const at::Tensor& operand,
                                     int64_t layout) {
  if (!a.is_cuda() || a.dim() != 2 || operand.dim() != 2 || a.device() != operand.device() ||
      !takes(a) || !takes(operand)) {
    return std::nullopt;
  }
  const int64_t m = a.size(0), k = a.size(1);
  const int64_t n = layout == 0 ? operand.size(1) : operand.size(0);
  const int64_t operand_k = layout == 0 ? operand.size(0) : operand.size(1);
  if (m == 0 || n == 0 || k == 0 || operand_k != k) return std::nullopt;
  Entry* e = entry_for(m, n, k, layout);
  const int device = a.get_device();
  if (e == nullptr || device >= kMaxDevices) return std::nullopt;
  const Resolved& r = resolved(*e, device);
  if (!r.why_not.empty() || e->refusals.refused(device)) return std::nullopt;
  c10::cuda::CUDAGuard guard(a.device());
  int plan = 0;
  size_t workspace_bytes = 0;
  {
    std::lock_guard<std::mutex> lock(e->mutex);
    auto known = e->per_m.find(m);
    if (known == e->per_m.end()) {
      if (e->algo.empty()) {
        workspace_bytes = r.workspace(int(m), int(n), int(k));
      } else {
        plan = r.prepare(int(m), int(n), int(k), int(layout), e->algo.data(), int(e->algo.size()),
                         &workspace_bytes);
      }
      known = e->per_m.emplace(m, std::make_pair(plan, workspace_bytes)).first;
    }
    std::tie(plan, workspace_bytes) = known->second;
  }
  if (plan < 0) {
    fallback_warning(e->name + ": cuBLASLt rejects the pinned algorithm at M=" +
                     std::to_string(m) + " (code " + std::to_string(plan) + ")");
    return std::nullopt;
  }
  at::Tensor c = at::empty({m, n}, a.options());
  at::Tensor workspace;
  if (workspace_bytes) {
    workspace = at::empty({int64_t(workspace_bytes)}, a.options().dtype(at::kByte));
  }
  void* ws = workspace_bytes ? workspace.data_ptr() : nullptr;
  void* stream = c10::cuda::getCurrentCUDAStream(device).stream();
  const int status =
      e->algo.empty()
          ? r.launch(a.data_ptr(), operand.data_ptr(), c.data_ptr(), int(m), int(n), int(k), ws,
                     stream)
          : r.run(plan, a.data_ptr(), operand.data_ptr(), c.data_ptr(), ws, stream);
  switch (gemmforge_ops::launch_verdict(status, e->algo.empty())) {
    case gemmforge_ops::Verdict::kRan:
      return c;
    case gemmforge_ops::Verdict::kRefused:
      if (e->refusals.refuse(device)) {
        fallback_warning(e->name + " cannot run on this GPU (CUDA error " +
                         std::to_string(status) + ")");
      }
      return std::nullopt;
    case gemmforge_ops::Verdict::kFailed:
      break;
  }
  TORCH_CHECK(false, "gemmforge: ", e->name, " failed to launch (status ", status, ")");
  return std::nullopt;
}

// C = A.B for any B: B row-major is NN, B^T row-major (nn.Linear's weight, transposed) TN.
std::optional<at::Tensor> bundle_matmul(const at::Tensor& a, const at::Tensor& b) {
  if (b.dim() != 2) return std::nullopt;
  if (b.is_contiguous()) return bundle_run(a, b, 0);
  if (b.stride(0) == 1 && b.stride(1) == b.size(0)) return bundle_run(a, b.t(), 1);
  return std::nullopt;
}

at::Tensor hgemm_cuda(const at::Tensor& a, const at::Tensor& b) {
  if (auto c = bundle_matmul(a, b)) return *c;
  return at::matmul(a, b);  // a fresh tensor: the op never returns a view of its inputs
}

// Y = X.W^T: W (N x K) row-major is the TN operand as it is (no view made per call).
at::Tensor hgemm_linear_cuda(const at::Tensor& x, const at::Tensor& w) {
  if (x.dim() > 2 && x.is_contiguous()) {
    std::vector<int64_t> out(x.sizes().begin(), x.sizes().end() - 1);
    out.push_back(w.size(0));
    return hgemm_linear_cuda(x.reshape({-1, x.size(-1)}), w).view(out);
  }
  if (auto c = bundle_run(x, w, 1)) return *c;
  return at::matmul(x, w.t());
}

// The CPU (and any other device): torch.matmul, so the ops work wherever torch.matmul does.
at::Tensor hgemm_other(const at::Tensor& a, const at::Tensor& b) { return at::matmul(a, b); }

at::Tensor hgemm_linear_other(const at::Tensor& x, const at::Tensor& w) {
  return at::matmul(x, w.t());
}

using BinaryOp = c10::TypedOperatorHandle<at::Tensor(const at::Tensor&, const at::Tensor&)>;

// gemmforge::<name> with autograd already handled: straight to the device's kernel.
at::Tensor call_below_autograd(const BinaryOp& op, const at::Tensor& a, const at::Tensor& b) {
  at::AutoDispatchBelowADInplaceOrView guard;
  return op.call(a, b);
}

const BinaryOp& hgemm_op() {
  static const BinaryOp op = c10::Dispatcher::singleton()
                                 .findSchemaOrThrow("gemmforge::hgemm", "")
                                 .typed<at::Tensor(const at::Tensor&, const at::Tensor&)>();
  return op;
}

const BinaryOp& hgemm_linear_op() {
  static const BinaryOp op = c10::Dispatcher::singleton()
                                 .findSchemaOrThrow("gemmforge::hgemm_linear", "")
                                 .typed<at::Tensor(const at::Tensor&, const at::Tensor&)>();
  return op;
}

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// C = A.B: dA = dC.B^T, dB = A^T.dC.
struct HgemmFunction : public torch::autograd::Function<HgemmFunction> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& a, const at::Tensor& b) {
    ctx->save_for_backward({a, b});
    return call_below_autograd(hgemm_op(), a, b);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &a = saved[0], &b = saved[1], &grad = grads[0];
    at::Tensor grad_a, grad_b;
    if (ctx->needs_input_grad(0)) grad_a = grad.matmul(b.t());
    if (ctx->needs_input_grad(1)) grad_b = a.t().matmul(grad);
    return {grad_a, grad_b};
  }
};

// Y = X.W^T with X (..., K): dX = dY.W, dW = dY^T.X over the folded leading dimensions.
struct HgemmLinearFunction : public torch::autograd::Function<HgemmLinearFunction> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& w) {
    ctx->save_for_backward({x, w});
    return call_below_autograd(hgemm_linear_op(), x, w);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &x = saved[0], &w = saved[1], &grad = grads[0];
    at::Tensor grad_x, grad_w;
    if (ctx->needs_input_grad(0)) grad_x = grad.matmul(w);
    if (ctx->needs_input_grad(1)) {
      grad_w = grad.reshape({-1, grad.size(-1)}).t().matmul(x.reshape({-1, x.size(-1)}));
    }
    return {grad_x, grad_w};
  }
};

bool needs_graph(const at::Tensor& a, const at::Tensor& b) {
  return c10::GradMode::is_enabled() && (a.requires_grad() || b.requires_grad());
}

at::Tensor hgemm_autograd(const at::Tensor& a, const at::Tensor& b) {
  if (!needs_graph(a, b)) return call_below_autograd(hgemm_op(), a, b);
  return HgemmFunction::apply(a, b);
}

at::Tensor hgemm_linear_autograd(const at::Tensor& x, const at::Tensor& w) {
  if (!needs_graph(x, w)) return call_below_autograd(hgemm_linear_op(), x, w);
  return HgemmLinearFunction::apply(x, w);
}

// One dispatch-table entry: Ms in [lo, hi] of (n, k, layout) go to `library` (a kernel with
// gemmforge's C ABI, or with a non-empty `algo` the cuBLASLt shim running that pinned config).
void add_entry(int64_t n, int64_t k, int64_t layout, int64_t lo, int64_t hi, int64_t m,
               const std::string& name, const std::string& library, const std::string& archs,
               int64_t built_cuda, c10::IntArrayRef algo, const std::string& lt_gpu,
               int64_t lt_version) {
  TORCH_CHECK(lo <= hi && (layout == 0 || layout == 1), "gemmforge: bad entry ", name);
  auto e = std::make_unique<Entry>();
  e->lo = lo; e->hi = hi; e->m = m; e->name = name; e->library = library; e->archs = archs;
  e->built_cuda = built_cuda; e->algo.assign(algo.begin(), algo.end());
  e->lt_gpu = lt_gpu; e->lt_version = lt_version;
  std::lock_guard<std::mutex> lock(g_table_mutex);
  auto& entries = g_table[Key{n, k, layout}];
  for (const auto& other : entries) {
    TORCH_CHECK(hi < other->lo || other->hi < lo, "gemmforge: overlapping M ranges: ", name,
                " and ", other->name);
  }
  entries.push_back(std::move(e));
  std::sort(entries.begin(), entries.end(),
            [](const auto& x, const auto& y) { return x->lo < y->lo; });
}

// Which entry serves a problem, by name ("" for torch.matmul): what the tests ask.
std::string entry_name(int64_t m, int64_t n, int64_t k, int64_t layout) {
  Entry* e = entry_for(m, n, k, layout);
  return e ? e->name : "";
}

}  // namespace

TORCH_LIBRARY(gemmforge, m) {
  m.def("hgemm(Tensor a, Tensor b) -> Tensor");
  m.def("hgemm_linear(Tensor x, Tensor w) -> Tensor");
  m.def(
      "_add_entry(int n, int k, int layout, int lo, int hi, int m, str name, str library, "
      "str archs, int built_cuda, int[] algo, str lt_gpu, int lt_version) -> ()",
      add_entry);
  m.def("_entry_name(int m, int n, int k, int layout) -> str", entry_name);
}

TORCH_LIBRARY_IMPL(gemmforge, CUDA, m) {
  m.impl("hgemm", hgemm_cuda);
  m.impl("hgemm_linear", hgemm_linear_cuda);
}

TORCH_LIBRARY_IMPL(gemmforge, CPU, m) {
  m.impl("hgemm", hgemm_other);
  m.impl("hgemm_linear", hgemm_linear_other);
}

TORCH_LIBRARY_IMPL(gemmforge, Autograd, m) {
  m.impl("hgemm", hgemm_autograd);
  m.impl("hgemm_linear", hgemm_linear_autograd);
}
