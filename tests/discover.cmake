# Registers the tests of a gtest program with ctest, after each build of it:
#
#   cmake -DTEST_EXECUTABLE=PATH -DOUTPUT=FILE -DLABELS=tests/labels.cmake -P tests/discover.cmake
#
# writes FILE, which ctest includes (CMakeLists.txt). Each test labelled other than `unit`
# (tests/labels.cmake) is a ctest test of its own; the unit tests of one gtest suite are
# one ctest test, run in one process. A process start costs 0.4 s on the 2-core machine
# (libtorch and its 290 libraries load and register), more than most unit tests take, so
# one process per suite makes `ctest -L unit` about twice as fast; a failure still names
# its gtest test in the output, and `ctest -R Suite` picks a suite.
cmake_minimum_required(VERSION 3.18)
execute_process(COMMAND "${TEST_EXECUTABLE}" --gtest_list_tests
  OUTPUT_VARIABLE listing ERROR_VARIABLE errors RESULT_VARIABLE rc TIMEOUT 120)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${TEST_EXECUTABLE} --gtest_list_tests failed (${rc}): ${errors}")
endif()
include("${LABELS}")

# Names never hold ';' or brackets; a parameter's printed value (after '#') may.
string(REPLACE ";" "," listing "${listing}")
string(REPLACE "[" "(" listing "${listing}")
string(REPLACE "]" ")" listing "${listing}")
string(REPLACE "\n" ";" lines "${listing}")

set(content "# Written by tests/discover.cmake from ${TEST_EXECUTABLE} --gtest_list_tests.\n")
set(suites "")
set(suite "")
set(count 0)
foreach(line IN LISTS lines)
  if(line MATCHES "^([^ #][^ ]*)\\.( .*)?$")
    set(suite "${CMAKE_MATCH_1}")
  elseif(line MATCHES "^  ([^ #]+)" AND NOT suite STREQUAL "")
    set(name "${suite}.${CMAKE_MATCH_1}")
    math(EXPR count "${count} + 1")
    glint_test_label("${name}" label)
    if(label STREQUAL "unit")
      string(MAKE_C_IDENTIFIER "${suite}" key)
      if(NOT key IN_LIST suites)
        list(APPEND suites ${key})
        set(suite_${key} "${suite}")
        set(filter_${key} "")
      endif()
      list(APPEND filter_${key} "${name}")
    else()
      string(APPEND content "add_test([==[${name}]==] \"${TEST_EXECUTABLE}\" [==[--gtest_filter=${name}]==])\n"
        "set_tests_properties([==[${name}]==] PROPERTIES LABELS ${label} TIMEOUT 600)\n")
    endif()
  endif()
endforeach()
if(count EQUAL 0)
  message(FATAL_ERROR "${TEST_EXECUTABLE} --gtest_list_tests listed no tests")
endif()
foreach(key IN LISTS suites)
  list(JOIN filter_${key} ":" filter)
  string(APPEND content "add_test([==[${suite_${key}}]==] \"${TEST_EXECUTABLE}\" [==[--gtest_filter=${filter}]==])\n"
    "set_tests_properties([==[${suite_${key}}]==] PROPERTIES LABELS unit TIMEOUT 600)\n")
endforeach()
file(WRITE "${OUTPUT}" "${content}")
