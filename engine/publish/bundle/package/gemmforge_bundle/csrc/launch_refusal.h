// What the C++ ops (ops.cpp) make of a launch's status, and how a dispatch-table entry remembers
// that its kernel cannot run on a device: once refused there, every later call of that entry (its
// kernel on its bucket of problems) on that device goes straight to torch.matmul, with no
// allocation and no launch. Plain C++ with no CUDA or torch in it, so a test drives it without a
// GPU (tests/engine/publish/test_bundle_native.py).
#ifndef GEMMFORGE_LAUNCH_REFUSAL_H
#define GEMMFORGE_LAUNCH_REFUSAL_H

#include <algorithm>
#include <atomic>
#include <iterator>

namespace gemmforge_ops {

constexpr int kMaxDevices = 64;
// CUDA errors that mean "this kernel cannot run here" and leave nothing half-done: insufficient
// driver (35), no kernel image for the device (209), unsupported PTX (222), system driver
// mismatch (803), forward compatibility not supported on this device (804).
constexpr int kCannotRunHere[] = {35, 209, 222, 803, 804};

enum class Verdict {
  kRan,      // the result is in the output
  kRefused,  // the kernel cannot run on this device: fall back, now and on every later call
  kFailed,   // an error to raise
};

// `from_kernel`: the status is a kernel library's (0 or a cudaError_t); else it is the cuBLASLt
// shim's (0 or 1000 + a cublasStatus_t), which refuses a problem earlier, when it plans it.
inline Verdict launch_verdict(int status, bool from_kernel) {
  if (status == 0) return Verdict::kRan;
  const bool cannot_run =
      std::find(std::begin(kCannotRunHere), std::end(kCannotRunHere), status) !=
      std::end(kCannotRunHere);
  return from_kernel && cannot_run ? Verdict::kRefused : Verdict::kFailed;
}

// Per device, whether an entry's kernel refused to run there. Read on every call without a lock.
class Refusals {
 public:
  bool refused(int device) const { return refused_[device].load(std::memory_order_relaxed); }
  // Records a refusal on `device`; true for the first record only (the call that warns).
  bool refuse(int device) { return !refused_[device].exchange(true); }

 private:
  std::atomic<bool> refused_[kMaxDevices] = {};
};

}  // namespace gemmforge_ops

#endif  // GEMMFORGE_LAUNCH_REFUSAL_H
