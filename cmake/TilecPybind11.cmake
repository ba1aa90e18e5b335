# Finds Python and pybind11 for tilec's extension modules, once per build.
# Shared by the top-level build (python/) and the runtime, which also builds on
# its own on GPU hosts (cmake -S lib/runtime). Builds for the python3 on PATH
# (the one that runs the tests) unless -DPython_EXECUTABLE=... says otherwise;
# pybind11's CMake package is located through `python3 -m pybind11`.
if(TARGET pybind11::module)
  return()
endif()
if(NOT Python_EXECUTABLE)
  find_program(Python_EXECUTABLE NAMES python3 python REQUIRED)
endif()
find_package(Python 3.8 REQUIRED COMPONENTS Interpreter Development.Module)
if(NOT pybind11_DIR)
  execute_process(
    COMMAND "${Python_EXECUTABLE}" -m pybind11 --cmakedir
    OUTPUT_VARIABLE _tilec_pybind11_dir
    OUTPUT_STRIP_TRAILING_WHITESPACE
    RESULT_VARIABLE _tilec_pybind11_rc)
  if(_tilec_pybind11_rc EQUAL 0)
    set(pybind11_DIR "${_tilec_pybind11_dir}" CACHE PATH "pybind11 CMake package")
  endif()
endif()
find_package(pybind11 CONFIG REQUIRED)
