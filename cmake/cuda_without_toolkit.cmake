# A CUDA libtorch (a pip PyTorch, Debian's libtorch-cuda) without the CUDA toolkit.
#
# find_package(Torch) on a CUDA build runs Caffe2's public/cuda.cmake, which looks for nvcc
# and the toolkit's libraries and stops the configure without them, although glint has no
# .cu file: it only includes c10/ATen CUDA headers and links libtorch_cuda. That file
# returns at once when the target torch::cudart exists (libtorch 2.6 to 2.14 alike), so
# where no nvcc is found this defines torch::cudart and torch::nvtoolsext itself:
#   - include directories: GLINT_CUDA_INCLUDE_DIRS, else /usr/local/cuda/include, else the
#     headers that pip's nvidia-* packages install beside torch (nvidia/*/include);
#   - libcudart from the same places when it is there, and the library folders of those
#     packages for the linker to resolve libtorch_cuda's own dependencies.
# GLINT_CUDA_STAND_IN: AUTO (when no nvcc is found), ON (always: scripts/cuda-compile-check.sh),
# OFF (never). Harmless for a CPU libtorch, which never reads these targets.

set(GLINT_CUDA_STAND_IN AUTO CACHE STRING "Stand-ins for the CUDA toolkit's CMake targets: AUTO, ON or OFF")
set(GLINT_CUDA_INCLUDE_DIRS "" CACHE STRING "CUDA headers for a CUDA libtorch without the toolkit")

if(GLINT_CUDA_STAND_IN STREQUAL "AUTO")
  find_program(GLINT_NVCC nvcc HINTS ENV CUDA_HOME ENV CUDA_PATH PATH_SUFFIXES bin PATHS /usr/local/cuda/bin)
  if(GLINT_NVCC)
    set(glint_stand_in OFF)
  else()
    set(glint_stand_in ON)
  endif()
else()
  set(glint_stand_in ${GLINT_CUDA_STAND_IN})
endif()

if(glint_stand_in AND NOT TARGET torch::cudart)
  # Where pip puts the CUDA packages: site-packages/nvidia/<package>/{include,lib}, beside
  # site-packages/torch/share/cmake (a CMAKE_PREFIX_PATH entry).
  set(glint_nvidia_dirs "")
  foreach(prefix ${CMAKE_PREFIX_PATH})
    get_filename_component(site "${prefix}/../../.." ABSOLUTE)
    if(IS_DIRECTORY "${site}/nvidia")
      file(GLOB dirs LIST_DIRECTORIES true "${site}/nvidia/*")
      list(APPEND glint_nvidia_dirs ${dirs})
    endif()
  endforeach()
  set(glint_cuda_includes ${GLINT_CUDA_INCLUDE_DIRS})
  if(NOT glint_cuda_includes)
    if(EXISTS /usr/local/cuda/include/cuda_runtime_api.h)
      set(glint_cuda_includes /usr/local/cuda/include)
    endif()
    foreach(d ${glint_nvidia_dirs})
      if(IS_DIRECTORY "${d}/include")
        list(APPEND glint_cuda_includes "${d}/include")
      endif()
    endforeach()
  endif()
  set(glint_cudart "")
  set(glint_rpath_link "")
  foreach(d ${glint_nvidia_dirs})
    if(IS_DIRECTORY "${d}/lib")
      list(APPEND glint_rpath_link "-Wl,-rpath-link,${d}/lib")
      file(GLOB found "${d}/lib/libcudart.so*")
      if(found AND NOT glint_cudart)
        list(GET found 0 glint_cudart)
      endif()
    endif()
  endforeach()
  add_library(torch::cudart INTERFACE IMPORTED)
  set_property(TARGET torch::cudart PROPERTY INTERFACE_INCLUDE_DIRECTORIES "${glint_cuda_includes}")
  set_property(TARGET torch::cudart PROPERTY INTERFACE_LINK_LIBRARIES ${glint_cudart} ${glint_rpath_link})
  add_library(torch::nvtoolsext INTERFACE IMPORTED)
  # Debian's libtorch-cuda names the CUDA 12 target CUDA::nvToolsExt (gone in CUDA 13).
  if(NOT TARGET CUDA::nvToolsExt)
    add_library(CUDA::nvToolsExt INTERFACE IMPORTED)
  endif()
  message(STATUS "glint: no nvcc; CUDA headers from: ${glint_cuda_includes}; cudart: ${glint_cudart}")
endif()
