# Writes a C++ source defining `NAMESPACE::SYMBOL` as a std::string_view over
# the bytes of INPUT, so text assets (the HTML report's CSS and script) are
# compiled into the library instead of being looked up at run time.
#   cmake -DINPUT=in.js -DOUTPUT=out.cpp -DNAMESPACE=ns -DSYMBOL=kName -P EmbedText.cmake
file(READ "${INPUT}" content)
set(delim "anefit_asset")
string(FIND "${content}" ")${delim}\"" clash)
if(NOT clash EQUAL -1)
  message(FATAL_ERROR "${INPUT} contains the raw-string delimiter )${delim}\"")
endif()
get_filename_component(name "${INPUT}" NAME)
file(WRITE "${OUTPUT}"
  "// Generated from ${name} by cmake/EmbedText.cmake; do not edit.\n"
  "#include <string_view>\n"
  "namespace ${NAMESPACE} {\n"
  "extern const std::string_view ${SYMBOL};\n"
  "const std::string_view ${SYMBOL} = R\"${delim}(${content})${delim}\";\n"
  "}\n")
