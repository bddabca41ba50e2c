// Names for dtypes and devices as they appear in files, configs and flags.
#pragma once

#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

#include <string>

namespace glint {

// "float32"/"fp32"/"float", "bfloat16"/"bf16", "float16"/"fp16"/"half", "float64".
// Throws glint::Error naming `what` (e.g. "--dtype") for anything else.
c10::ScalarType parse_dtype(const std::string& name, const std::string& what);
std::string dtype_name(c10::ScalarType t);  // "float32", "bfloat16", ...

// "cpu", "cuda", "cuda:N". Throws glint::Error for others, or for CUDA without a GPU.
c10::Device parse_device(const std::string& name, const std::string& what);

// The defaults behind "--device auto" and "--dtype auto": rank `local_rank`'s GPU
// (cuda:LOCAL_RANK) when the build has CUDA and a GPU is present, else the CPU; "cuda"
// alone also means cuda:LOCAL_RANK; a GPU index the machine lacks is an error naming it.
// bfloat16 on a GPU, float32 on the CPU.
c10::Device resolve_device(const std::string& name, int local_rank, const std::string& what);
c10::ScalarType resolve_dtype(const std::string& name, const c10::Device& device, const std::string& what);

// Bytes per element of a floating dtype glint stores.
size_t dtype_size(c10::ScalarType t);

}  // namespace glint
