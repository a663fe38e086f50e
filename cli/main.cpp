// The `ampgrad` command: parses the subcommand and reports errors as one clear line.
#include <cstdio>

#include "cli/commands.h"
#include <ampgrad/core/error.h>

int main(int argc, char** argv) {
  CLI::App app{"ampgrad: a C++ tensor library with its own autograd and native mixed precision"};
  app.require_subcommand(1);
  ampgrad::cli::add_train(app);
  ampgrad::cli::add_sample(app);
  ampgrad::cli::add_explain(app);
  ampgrad::cli::add_ops(app);
  ampgrad::cli::add_bench(app);
  ampgrad::cli::add_demo(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const ampgrad::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
