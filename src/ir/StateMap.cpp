//===- StateMap.cpp - How the host carries moved states -------------------===//
//
// JSON form of the state map (schema "anefit.statemap/1").
//
//===----------------------------------------------------------------------===//
#include "ir/StateMap.h"

#include "support/Error.h"
#include "support/Json.h"

#include <nlohmann/json.hpp>

namespace anefit {

const StateMapEntry *StateMap::find(const std::string &state) const {
  for (const StateMapEntry &e : entries)
    if (e.state == state)
      return &e;
  return nullptr;
}

std::string StateMap::toJson(int indent) const {
  nlohmann::ordered_json j;
  j["schema"] = kSchema;
  j["states"] = nlohmann::ordered_json::array();
  for (const StateMapEntry &e : entries) {
    nlohmann::ordered_json s;
    s["state"] = e.state;
    s["input"] = e.input;
    s["output"] = e.output;
    s["shape"] = e.shape;
    s["dtype"] = std::string(dtypeName(e.dtype));
    s["initial"] = "zeros";
    s["written"] = e.written;
    s["functions"] = e.functions;
    j["states"].push_back(std::move(s));
  }
  j["kept_states"] = keptStates;
  return dumpJson(j, indent);
}

StateMap StateMap::fromJson(const std::string &text, const std::string &origin) {
  nlohmann::json j = parseJson(text, origin);
  if (j.is_discarded() || !j.is_object())
    failExpected(origin, "", "a JSON object", "malformed JSON");
  if (!j.contains("schema") || j["schema"] != kSchema)
    failExpected(origin, "schema", std::string("\"") + kSchema + "\"",
                 j.contains("schema") ? dumpJson(j["schema"]) : "nothing");
  StateMap map;
  if (!j.contains("states") || !j["states"].is_array())
    failExpected(origin, "states", "an array",
                 j.contains("states") ? dumpJson(j["states"]) : "nothing");
  size_t index = 0;
  for (const auto &s : j["states"]) {
    std::string place = "states[" + std::to_string(index++) + "]";
    auto str = [&](const char *key) {
      if (!s.is_object() || !s.contains(key) || !s[key].is_string())
        failExpected(origin, place + "." + key, "a string", "something else");
      return s[key].get<std::string>();
    };
    StateMapEntry e;
    e.state = str("state");
    e.input = str("input");
    e.output = str("output");
    auto dt = dtypeFromName(str("dtype"));
    if (!dt)
      failExpected(origin, place + ".dtype", "a MIL dtype name", dumpJson(s["dtype"]));
    e.dtype = *dt;
    if (!s.contains("shape") || !s["shape"].is_array())
      failExpected(origin, place + ".shape", "an array of integers", "something else");
    for (const auto &d : s["shape"]) {
      if (!d.is_number_integer() || d.get<int64_t>() < 0)
        failExpected(origin, place + ".shape", "non-negative integers", dumpJson(d));
      e.shape.push_back(d.get<int64_t>());
    }
    if (s.contains("written") && s["written"].is_boolean())
      e.written = s["written"].get<bool>();
    if (s.contains("functions") && s["functions"].is_array())
      for (const auto &f : s["functions"])
        if (f.is_string())
          e.functions.push_back(f.get<std::string>());
    map.entries.push_back(std::move(e));
  }
  if (j.contains("kept_states") && j["kept_states"].is_array())
    for (const auto &k : j["kept_states"])
      if (k.is_string())
        map.keptStates.push_back(k.get<std::string>());
  return map;
}

std::string stateMapPathFor(const std::string &modelPath) {
  std::string p = modelPath;
  while (p.size() > 1 && p.back() == '/')
    p.pop_back();
  size_t slash = p.find_last_of('/');
  size_t dot = p.find_last_of('.');
  if (dot != std::string::npos && (slash == std::string::npos || dot > slash))
    p = p.substr(0, dot);
  return p + ".statemap.json";
}

} // namespace anefit
