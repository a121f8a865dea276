//===- Module.cpp - The anefit._core extension module ---------------------===//
//
// Python bindings over the libraries the command-line program uses. Every
// InputError becomes anefit.InputError (a ValueError) with the same one-line
// message; nothing a caller passes may end the interpreter process. Long
// calls (loading, checking, running) release the GIL.
//
//===----------------------------------------------------------------------===//
#include "Bindings.h"

#include "Command.h"
#include "support/Error.h"

#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <iostream>

namespace nb = nanobind;
using namespace anefit::python;

NB_MODULE(_core, m) {
  m.doc() = "anefit's C++ core: models, the ANE checker, the interpreter.";
  m.attr("__version__") = ANEFIT_VERSION;
  nb::exception<anefit::InputError>(m, "InputError", PyExc_ValueError).doc() =
      "A problem with user input (a malformed or missing model file, a bad option, "
      "an input of the wrong shape), with the one-line message ``anefit`` prints.";

  bindModel(m);
  bindCheck(m);
  bindRun(m);
  bindTransform(m);

  m.def(
      "main",
      [](std::vector<std::string> args) {
        std::vector<const char *> argv;
        for (const std::string &a : args)
          argv.push_back(a.c_str());
        int code;
        {
          nb::gil_scoped_release release;
          code = anefit::cli::runCommandLine(static_cast<int>(argv.size()), argv.data());
          std::cout.flush();
          std::cerr.flush();
        }
        return code;
      },
      nb::arg("argv"),
      "Runs the ``anefit`` command line in this process with ``argv`` (``argv[0]`` is the "
      "program name) and returns its exit code: 0 ok, 1 findings, 2 usage or input error.");
}
