# The ctest label of every test of glint_tests, by its gtest name (Suite.Test, with
# Prefix/ and /Param for parameterized tests): the first group whose pattern matches,
# `unit` for the rest. tests/discover.cmake reads this when it registers the tests.
#
#   unit         one process, seconds: `ctest -L unit`
#   multirank    ranks started through `glint launch` or mpirun on this machine
#   multinode    simulated nodes (network namespaces joined by veth pairs): needs root
#   convergence  trains until a target is reached (a loss, an exact-match rate)
#   browser      draws the report page in Chromium (skips where none is installed)
#   reference    the npm reference implementations (glint_reference_tests, labelled in
#                CMakeLists.txt)
#
# A test over 120 s on the 2-core machine is listed here with the reason it takes that long
# (none today: the longest, the built-in task's 1,000 steps in GenerateCli, takes 50 s).

set(glint_label_groups multinode multirank convergence browser)
set(glint_label_multinode "^MultiNode\\.")
set(glint_label_multirank
  "^(DistComm|DistLaunch|Mpirun|DistFaults|ResumeFaults|TenantTraining|Evaluation|CheckpointExport|ShardedLoad)\\.|/(DataParallel|Resume|PeakMemory)\\.|/Service(Training|Paging)\\..*/FourRanks")
# Each trains the built-in task (or a bf16 run) until its target: a 1,000-step run and
# generation with its adapter (50 s), bf16 reaching the float32 loss (13 s), a LoRA run
# whose loss must fall by a fifth (4 s); and RL through glint serve, 50 iterations of
# sampling and importance_sampling updates that must raise a tiny model's mean sampled
# reward by 0.2 (ServiceRl, 4 s).
set(glint_label_convergence
  "^(GenerateCli\\.TheBuiltInTaskAdapterChangesTheAnswer|MixedPrecision\\.Bf16LoraReachesTheFloat32Loss|Trainer\\.LoraLearnsTheBuiltInTask)$|^ServiceRl\\.")
set(glint_label_browser "^ReportBrowser\\.")

# glint_test_label(NAME VAR): VAR = the label of the test NAME.
function(glint_test_label name var)
  foreach(group IN LISTS glint_label_groups)
    if(name MATCHES "${glint_label_${group}}")
      set(${var} ${group} PARENT_SCOPE)
      return()
    endif()
  endforeach()
  set(${var} unit PARENT_SCOPE)
endfunction()
