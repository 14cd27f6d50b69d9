// What loading a config text answers, for the tests of its errors.
#pragma once

#include <string>

#include "config/config.hpp"

namespace sluice::config::testing {

// The error `yaml` gives as "inline.yaml", or "<no error>" when it loads.
inline std::string error_of(const std::string& yaml) {
    try {
        load_string(yaml, "inline.yaml");
    } catch (const config_error& e) {
        return e.what();
    }
    return "<no error>";
}

}  // namespace sluice::config::testing
