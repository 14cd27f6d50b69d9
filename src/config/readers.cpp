// The typed readers: a value from a YAML node, or a config_error at its position.
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "config/readers.hpp"

namespace sluice::config::detail {

cidr read_cidr(const node_ref& v) { return take(v, parse_cidr_why(v.scalar(bad_cidr))); }

duration read_duration(const node_ref& v, zero z) {
    duration d = take(v, parse_duration_why(v.scalar(bad_duration)));
    if (z == zero::refused && d.count() == 0) v.fail(not_positive);
    return d;
}

std::uint64_t read_size(const node_ref& v, std::uint64_t min, std::uint64_t max) {
    std::uint64_t n = take(v, parse_size_why(v.scalar(bad_size)));
    schema::check_range(v, n, min, max);
    return n;
}

address read_address(const node_ref& v) { return take(v, parse_address_why(v.scalar(bad_address))); }

upstream_url read_upstream_url(const node_ref& v) { return take(v, parse_upstream_url_why(v.scalar(bad_url))); }

host_port read_host_port(const node_ref& v) { return take(v, parse_host_port_why(v.scalar(bad_host_port))); }

// A string that must not be empty.
std::string read_string(const node_ref& v) {
    const std::string& s = v.scalar(expected_string);
    if (s.empty()) v.fail(must_not_be_empty);
    return s;
}

// A string that `valid` accepts; `expected` says what it should look like.
std::string read_checked(const node_ref& v, bool (*valid)(std::string_view), std::string_view expected) {
    const std::string& s = v.scalar(expected);
    if (!valid(s)) v.fail(expected);
    return s;
}

std::string read_env_name(const node_ref& v) { return read_checked(v, is_env_name, bad_env_name); }

void read_list(const node_ref& v, empty_list empty, const std::function<void(const node_ref&)>& read_item) {
    if (schema::read_sequence(v, read_item) == 0 && empty == empty_list::refused) {
        v.fail(must_not_be_empty);
    }
}

// A list of distinct strings, each read by `read_item`.
std::vector<std::string> read_distinct(const node_ref& v, std::string (*read_item)(const node_ref&)) {
    std::vector<std::string> out;
    read_list(v, empty_list::refused, [&](const node_ref& item) {
        std::string s = read_item(item);
        if (std::find(out.begin(), out.end(), s) != out.end()) item.fail(listed_twice);
        out.push_back(std::move(s));
    });
    return out;
}

std::vector<cidr> read_cidrs(const node_ref& v) {
    std::vector<cidr> out;
    read_list(v, empty_list::allowed, [&](const node_ref& item) { out.push_back(read_cidr(item)); });
    return out;
}

std::vector<host_port> read_host_ports(const node_ref& v) {
    std::vector<host_port> out;
    read_list(v, empty_list::refused, [&](const node_ref& item) { out.push_back(read_host_port(item)); });
    return out;
}

// A limit, burst or cost.
std::int64_t read_count(const node_ref& v) { return schema::read_uint_as<std::int64_t>(v, 1, max_count); }

// A file the gateway will open at start: it must be readable now (config load, --check).
std::string read_readable_file(const node_ref& v) {
    std::string path = read_string(v);
    std::error_code ec;
    if (!std::filesystem::is_regular_file(path, ec)) v.fail("no such file: " + path);
    if (::access(path.c_str(), R_OK) != 0) v.fail("cannot read " + path + ": " + std::strerror(errno));
    return path;
}

}  // namespace sluice::config::detail
