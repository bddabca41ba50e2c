# Unity builds: a target's sources compiled as a few larger translation units, so the
# LibTorch headers (8-14 s of parsing per file on the 2-core machine) are parsed once per
# batch instead of once per file (docs/BUILDING.md has the measurements).
#
# CMake's own UNITY_BUILD writes absolute paths into its batch files, so a clone in
# another directory (CI's clean clone) would miss every ccache entry of this one. The
# batches here include their sources by paths relative to the source root, which ccache
# (CCACHE_BASEDIR, scripts/build.sh) sees as the same text in every clone.
#
# Sources are batched within their folder (src/model and its family folders are one
# folder: the first two path components), so adding or removing a file rebatches only
# its folder. A folder of n files gets ceil(n / GLINT_UNITY_BATCH) batches of nearly
# equal size. GLINT_UNITY=OFF compiles every file on its own.

option(GLINT_UNITY "Compile each target's sources in batches (unity build)" ON)
set(GLINT_UNITY_BATCH 8 CACHE STRING "Source files per unity batch")

# glint_unity_sources(TARGET SRC...): adds SRC (absolute paths under the source root)
# to TARGET, batched when GLINT_UNITY is on.
function(glint_unity_sources target)
  set(sources ${ARGN})
  if(NOT GLINT_UNITY)
    target_sources(${target} PRIVATE ${sources})
    return()
  endif()
  list(SORT sources)
  # folder -> its files, in sorted order
  set(folders "")
  foreach(src ${sources})
    file(RELATIVE_PATH rel ${CMAKE_SOURCE_DIR} ${src})
    string(REGEX MATCH "^[^/]+/[^/]+" folder "${rel}")
    string(MAKE_C_IDENTIFIER "${folder}" key)
    if(NOT key IN_LIST folders)
      list(APPEND folders ${key})
      set(files_${key} "")
    endif()
    list(APPEND files_${key} ${rel})
  endforeach()
  set(batch_sources "")
  foreach(key ${folders})
    list(LENGTH files_${key} n)
    math(EXPR batches "(${n} + ${GLINT_UNITY_BATCH} - 1) / ${GLINT_UNITY_BATCH}")
    # file i goes to batch i * batches / n: batches of nearly equal size, in order
    set(i 0)
    foreach(rel ${files_${key}})
      math(EXPR b "${i} * ${batches} / ${n}")
      string(APPEND content_${key}_${b} "#include \"${rel}\"\n")
      math(EXPR i "${i} + 1")
    endforeach()
    math(EXPR last "${batches} - 1")
    foreach(b RANGE ${last})
      set(out ${CMAKE_CURRENT_BINARY_DIR}/unity/${target}/${key}_${b}.cc)
      # Written only when its text changes, so a reconfigure rebuilds nothing.
      file(CONFIGURE OUTPUT ${out} CONTENT
        "// ${target}: a unity batch of ${key} (cmake/unity.cmake)\n${content_${key}_${b}}" @ONLY)
      list(APPEND batch_sources ${out})
    endforeach()
  endforeach()
  target_sources(${target} PRIVATE ${batch_sources})
  # The originals stay in the target (for IDEs and for reconfiguring when they change),
  # compiled only through their batch.
  target_sources(${target} PRIVATE ${sources})
  set_source_files_properties(${sources} TARGET_DIRECTORY ${target} PROPERTIES HEADER_FILE_ONLY ON)
  target_include_directories(${target} PRIVATE ${CMAKE_SOURCE_DIR})
  # g++ warns when a class defined in an included file has a member of a type from an
  # anonymous namespace, as a .cc's own classes are once a batch includes the .cc.
  target_compile_options(${target} PRIVATE $<$<CXX_COMPILER_ID:GNU>:-Wno-subobject-linkage>)
endfunction()
