// glint plot: draw a training run's metrics as one self-contained HTML page.
#include <CLI/CLI.hpp>

#include <iostream>
#include <memory>

#include "cli/commands.h"
#include "report/report.h"

namespace glint::cli {

Action add_plot(CLI::App& app) {
  struct Args {
    std::string run_dir, output;
  };
  auto a = std::make_shared<Args>();
  CLI::App* cmd = add_command(app, "plot");
  cmd->add_option("OUT", a->run_dir, "the run's output directory (the --output of glint train), holding metrics.jsonl")
      ->required();
  cmd->add_option("--output", a->output, "the HTML file to write instead of OUT/report.html");
  return [a]() {
    ReportOptions options;
    options.output = a->output.empty() ? a->run_dir + "/report.html" : a->output;
    write_report(a->run_dir, options);
    std::cerr << "wrote " << options.output << "\n";
    return 0;
  };
}

}  // namespace glint::cli
