# Finds ExecuTorch's runtime for src/executorch: sets ANEFIT_EXECUTORCH_FOUND,
# ANEFIT_EXECUTORCH_DIR (the executorch package directory) and
# ANEFIT_EXECUTORCH_VERSION ("1.5.1", from its version.py).
#
# Where it looks, the first that has the runtime wins:
#   1. ANEFIT_EXECUTORCH_DIR: the cache variable (-D, or a scikit-build-core
#      cmake.define), else the environment variable of that name;
#   2. the Python interpreter the build runs with, as it runs (scripts/setup.sh:
#      the .venv that has the runtime);
#   3. the same interpreter in isolated mode (-I). In pip's isolated build
#      (`pip install .`) the interpreter is the one of the environment pip
#      installs into, but its module path is the build environment's (pip sets
#      PYTHONPATH to it); -I drops that and sees the environment the wheel is
#      installed into, the one whose ExecuTorch the backend must match.
# The package is located, never imported (an import loads PyTorch). The package's
# own CMake config is not used: its targets need CMake 3.28. What 2 and 3 find
# is not cached: every configure asks again, so a build directory used for
# another environment (pyproject.toml's build-dir is kept between `pip install
# .` runs) is built against that environment's ExecuTorch, or without it.
set(ANEFIT_EXECUTORCH_FOUND OFF)
if(NOT ANEFIT_EXECUTORCH)
  message(STATUS "anefit: ANEFIT_EXECUTORCH=OFF: the Core ML backend (src/executorch) is not built")
  return()
endif()
set(_anefit_et_dir "${ANEFIT_EXECUTORCH_DIR}")
set(_anefit_et_how "ANEFIT_EXECUTORCH_DIR")
if(NOT _anefit_et_dir AND DEFINED ENV{ANEFIT_EXECUTORCH_DIR})
  set(_anefit_et_dir "$ENV{ANEFIT_EXECUTORCH_DIR}")
  set(_anefit_et_how "the environment's ANEFIT_EXECUTORCH_DIR")
endif()
if(NOT _anefit_et_dir)
  if(Python3_EXECUTABLE)
    set(_anefit_python "${Python3_EXECUTABLE}")
  elseif(Python_EXECUTABLE)
    set(_anefit_python "${Python_EXECUTABLE}")
  else()
    find_program(_anefit_python NAMES python3)
  endif()
  if(_anefit_python)
    set(_anefit_find_spec
        "import importlib.util as u; s = u.find_spec('executorch'); print(list(s.submodule_search_locations)[0] if s else '')")
    execute_process(COMMAND "${_anefit_python}" -c "${_anefit_find_spec}"
                    OUTPUT_VARIABLE _anefit_et_dir OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
    set(_anefit_et_how "${_anefit_python}")
    if(NOT _anefit_et_dir)
      execute_process(COMMAND "${_anefit_python}" -I -c "${_anefit_find_spec}"
                      OUTPUT_VARIABLE _anefit_et_dir OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
      set(_anefit_et_how "${_anefit_python} -I (the environment being installed into)")
    endif()
  endif()
endif()
if(_anefit_et_dir AND EXISTS "${_anefit_et_dir}/lib/libexecutorch.so"
   AND EXISTS "${_anefit_et_dir}/include/executorch/runtime/backend/interface.h")
  file(STRINGS "${_anefit_et_dir}/version.py" _anefit_et_version_line
       REGEX "^__version__ *= *")
  string(REGEX REPLACE "^__version__ *= *['\"]([^'\"+]*).*$" "\\1" ANEFIT_EXECUTORCH_VERSION
         "${_anefit_et_version_line}")
  set(ANEFIT_EXECUTORCH_DIR "${_anefit_et_dir}")
  set(ANEFIT_EXECUTORCH_FOUND ON)
  message(STATUS "anefit: ExecuTorch ${ANEFIT_EXECUTORCH_VERSION} runtime in ${_anefit_et_dir} "
                 "(from ${_anefit_et_how}): building the Core ML backend (src/executorch)")
elseif(_anefit_et_dir)
  message(WARNING "anefit: ${_anefit_et_dir} (from ${_anefit_et_how}) has no ExecuTorch runtime "
                  "(lib/libexecutorch.so, include/executorch): the Core ML backend is not built")
else()
  message(STATUS "anefit: no ExecuTorch runtime (pip install executorch before anefit, or set "
                 "ANEFIT_EXECUTORCH_DIR): the Core ML backend (src/executorch) is not built")
endif()
