#include "core/dtype.h"

#include <ATen/Context.h>
#include <c10/core/ScalarType.h>

#include "core/error.h"

namespace glint {

c10::ScalarType parse_dtype(const std::string& name, const std::string& what) {
  if (name == "float32" || name == "fp32" || name == "float") return c10::kFloat;
  if (name == "bfloat16" || name == "bf16") return c10::kBFloat16;
  if (name == "float16" || name == "fp16" || name == "half") return c10::kHalf;
  if (name == "float64" || name == "fp64" || name == "double") return c10::kDouble;
  fail(what, ": unknown dtype '", name, "' (expected float32, bfloat16, float16 or float64)");
}

std::string dtype_name(c10::ScalarType t) {
  switch (t) {
    case c10::kFloat: return "float32";
    case c10::kBFloat16: return "bfloat16";
    case c10::kHalf: return "float16";
    case c10::kDouble: return "float64";
    default: return c10::toString(t);
  }
}

c10::Device parse_device(const std::string& name, const std::string& what) {
  if (name == "cpu") return c10::Device(c10::kCPU);
  if (name.rfind("cuda", 0) == 0) {
    GLINT_CHECK(at::hasCUDA(), what, ": device '", name,
                "' requested but this build of glint has no CUDA device available");
    try {
      return c10::Device(name);
    } catch (const std::exception&) {
      fail(what, ": malformed device '", name, "' (expected cpu, cuda or cuda:N)");
    }
  }
  fail(what, ": unknown device '", name, "' (expected cpu, cuda or cuda:N)");
}

c10::Device resolve_device(const std::string& name, int local_rank, const std::string& what) {
  if (name == "auto" && !at::hasCUDA()) return c10::Device(c10::kCPU);
  c10::Device d = name == "auto" ? c10::Device(c10::kCUDA) : parse_device(name, what);
  if (!d.is_cuda()) return d;
  if (!d.has_index()) d = c10::Device(c10::kCUDA, c10::DeviceIndex(local_rank));
  const size_t gpus = at::getNumGPUs();
  GLINT_CHECK(size_t(d.index()) < gpus, what, " ", name, ": this process would take ", d.str(), " but the machine has ",
              gpus, gpus == 1 ? " GPU" : " GPUs", local_rank > 0 ? " (one per local rank: start at most that many ranks "
              "per node, or pass --device cpu)" : "");
  return d;
}

c10::ScalarType resolve_dtype(const std::string& name, const c10::Device& device, const std::string& what) {
  if (name == "auto") return device.is_cuda() ? c10::kBFloat16 : c10::kFloat;
  return parse_dtype(name, what);
}

size_t dtype_size(c10::ScalarType t) { return c10::elementSize(t); }

}  // namespace glint
