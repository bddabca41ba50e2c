// The test programs' main: first the settings glint-core's libraries load with
// (core/process_settings.h), so that tests compute as the commands do.
#include <gtest/gtest.h>

#include "core/process_settings.h"

int main(int argc, char** argv) {
  glint::restart_with_process_settings(argv);
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
