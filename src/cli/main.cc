#include <iostream>

int main(int argc, char** argv) {
  std::cerr << "glint: no commands yet\n";
  return 1;
}
