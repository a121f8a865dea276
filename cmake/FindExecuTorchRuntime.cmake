# Finds ExecuTorch's runtime for src/executorch: sets ANEFIT_EXECUTORCH_FOUND,
# ANEFIT_EXECUTORCH_DIR (the executorch package directory) and
# ANEFIT_EXECUTORCH_VERSION ("1.5.1", from its version.py). Without
# ANEFIT_EXECUTORCH_DIR it asks the Python interpreter where the executorch
# package is, without importing it (an import loads PyTorch). The package's
# own CMake config is not used: its targets need CMake 3.28.
set(ANEFIT_EXECUTORCH_FOUND OFF)
set(_anefit_et_dir "${ANEFIT_EXECUTORCH_DIR}")
if(NOT _anefit_et_dir)
  if(Python3_EXECUTABLE)
    set(_anefit_python "${Python3_EXECUTABLE}")
  elseif(Python_EXECUTABLE)
    set(_anefit_python "${Python_EXECUTABLE}")
  else()
    find_program(_anefit_python NAMES python3)
  endif()
  if(_anefit_python)
    execute_process(
      COMMAND "${_anefit_python}" -c
        "import importlib.util as u; s = u.find_spec('executorch'); print(list(s.submodule_search_locations)[0] if s else '')"
      OUTPUT_VARIABLE _anefit_et_dir OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
  endif()
endif()
if(_anefit_et_dir AND EXISTS "${_anefit_et_dir}/lib/libexecutorch.so"
   AND EXISTS "${_anefit_et_dir}/include/executorch/runtime/backend/interface.h")
  file(STRINGS "${_anefit_et_dir}/version.py" _anefit_et_version_line
       REGEX "^__version__ *= *")
  string(REGEX REPLACE "^__version__ *= *['\"]([^'\"+]*).*$" "\\1" ANEFIT_EXECUTORCH_VERSION
         "${_anefit_et_version_line}")
  set(ANEFIT_EXECUTORCH_DIR "${_anefit_et_dir}" CACHE PATH
      "The executorch package directory (include/, lib/libexecutorch.so); empty: ask Python" FORCE)
  set(ANEFIT_EXECUTORCH_FOUND ON)
  message(STATUS "anefit: ExecuTorch ${ANEFIT_EXECUTORCH_VERSION} runtime in ${_anefit_et_dir}: "
                 "building the Core ML backend (src/executorch)")
else()
  message(STATUS "anefit: no ExecuTorch runtime (pip install executorch, or set "
                 "ANEFIT_EXECUTORCH_DIR): the Core ML backend (src/executorch) is not built")
endif()
