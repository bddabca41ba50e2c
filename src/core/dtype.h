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

// Bytes per element of a floating dtype glint stores.
size_t dtype_size(c10::ScalarType t);

}  // namespace glint
