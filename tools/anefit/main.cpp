//===- main.cpp - The anefit command-line program -------------------------===//
//
// The executable is the command-line library (CommandLine.cpp) and nothing
// else, so the Python package can run the very same CLI in-process.
//
//===----------------------------------------------------------------------===//
#include "Command.h"

int main(int argc, char **argv) { return anefit::cli::runCommandLine(argc, argv); }
