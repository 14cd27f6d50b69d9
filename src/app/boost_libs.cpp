// Debian 12 packages Boost.JSON and Boost.URL 1.81 without their compiled libraries;
// this translation unit builds them into sluice_core.
#include <boost/json/src.hpp>
#include <boost/url/src.hpp>
