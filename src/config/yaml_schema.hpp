// A small schema walker over yaml-cpp nodes, used only while loading the config.
//
// Every value is read through a node_ref that knows the source name, its dotted key path
// and its position, so any reader can throw a config_error of the form
// "FILE:LINE:COLUMN: key.path: reason". A section is read by read_mapping() with a table
// of the keys it knows: unknown and duplicate keys are reported at the key, missing
// required keys at the mapping that lacks them. Adding a section is adding a table.
// Mappings whose keys are names chosen by the user (policies) are read by read_entries(),
// lists by read_sequence(); a list item's path is "key[INDEX]", counted from 0.
//
// describe() runs a reader without a document to list the keys its tables declare.
//
// Not thread-safe by design: a load runs on one thread and throws on the first error.
#pragma once

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include <yaml-cpp/yaml.h>

namespace sluice::config {

struct config;

}  // namespace sluice::config

namespace sluice::config::schema {

struct described_key;

// "SOURCE:LINE:COLUMN: PATH" (an empty path reads "(root)").
std::string position(const std::string& source, const YAML::Mark& mark, std::string_view path);
// Throws config_error "SOURCE:LINE:COLUMN: PATH: REASON".
[[noreturn]] void throw_error(const std::string& source, const YAML::Mark& mark, std::string_view path,
                              std::string_view reason);

class node_ref {
public:
    // The document root of `source`.
    node_ref(const YAML::Node& root, const std::string& source);

    const YAML::Node& node() const { return node_; }
    const std::string& source() const { return *source_; }
    const std::string& path() const { return path_; }
    bool is_null() const { return node_.IsNull(); }
    // Walked by describe(): there is no document, only the tables of keys.
    bool describing() const { return described_ != nullptr; }

    // Where errors about this value point: the value itself, or its key when the value
    // is empty (yaml-cpp marks an empty value at the token that follows it).
    YAML::Mark mark() const;

    // The value under `key` in this mapping; `key_node` supplies the fallback position.
    node_ref child(const YAML::Node& key_node, const YAML::Node& value) const;

    // Item `index` of this sequence: path "routes" + 2 -> "routes[2]".
    node_ref item(const YAML::Node& value, std::size_t index) const;

    // Key path of `key` below this node: "server" + "listen" -> "server.listen".
    std::string path_of(std::string_view key) const;

    [[noreturn]] void fail(std::string_view reason) const;
    // "SOURCE:LINE:COLUMN: PATH", what fail() puts before its reason: for a check that only
    // a module above config can make (config_error(where() + ": " + reason)).
    std::string where() const;
    // At this value's key (a mapping value), or where the list holding it starts (an item).
    [[noreturn]] void fail_at_key(std::string_view reason) const;
    [[noreturn]] void fail_at(const YAML::Mark& mark, std::string_view path, std::string_view reason) const;

    // The scalar text; fails with `expected` when the value is not a scalar.
    const std::string& scalar(std::string_view expected) const;

    // What describe() found so far; only when describing().
    std::vector<described_key>& described() const { return *described_; }
    // The value of `key` below this mapping, or the items of a list, while describing.
    node_ref described_child(std::string_view key) const;
    node_ref described_items() const;

    // An empty mapping that describe() walks: what it reads is recorded into `out`.
    static node_ref describe_root(std::vector<described_key>& out);

private:
    node_ref(const YAML::Node& node, std::string path, const std::string& source, YAML::Mark fallback,
             std::vector<described_key>* described = nullptr);

    YAML::Node node_;
    std::string path_;
    const std::string* source_;
    YAML::Mark fallback_;
    std::vector<described_key>* described_;
};

enum class presence { optional, required };

// For a key whose value is taken only at start: puts running's value back into next, and
// says whether next had another one.
using keep_fn = bool (*)(config& next, const config& running);

struct field {
    std::string_view key;
    std::function<void(const node_ref&)> read;
    presence need = presence::optional;
    keep_fn restart_only = nullptr;  // set: a reload keeps the running value (app/reload.cpp)
};

struct described_key {
    std::string path;
    keep_fn restart_only = nullptr;
};

// Every key that `read_root` may read, as dotted paths in table order: each read_mapping()
// it reaches lists its fields and describes each value in turn; a list stands for its items
// as "key[]", read_entries() for its entries as "key.<name>". The readers run on empty
// values and stop at the first they refuse, so only keys declared in field tables count.
std::vector<described_key> describe(const std::function<void(const node_ref&)>& read_root);

// Reads a mapping whose keys must all be in `fields`, in document order. An empty value
// (`server:` with nothing under it) counts as an empty mapping.
void read_mapping(const node_ref& map, std::initializer_list<field> fields);

// As read_mapping, but a key not in `fields` goes to `other` (the key, its value) instead of
// being refused. Described as the fields, then one entry at "KEY.<other_name>".
void read_mapping(const node_ref& map, std::initializer_list<field> fields, std::string_view other_name,
                  const std::function<void(const std::string&, const node_ref&)>& other);

// Reads a mapping whose keys are names chosen by the user, in document order: `read` gets
// each key and its value. Keys must be plain and unique. An empty value has no entries.
// Described as one entry named `placeholder` at the path "KEY.<placeholder>".
void read_entries(const node_ref& map, const std::function<void(const std::string&, const node_ref&)>& read,
                  std::string_view placeholder = "name");

// Reads a sequence item by item, in order; an empty value counts as an empty list.
// Fails with "expected a list" when the value is something else. Returns the item count.
std::size_t read_sequence(const node_ref& seq, const std::function<void(const node_ref&)>& read);

// "true" or "false", exactly.
bool read_bool(const node_ref& value);

// A plain decimal integer in [min, max]; signs, blanks and other bases are rejected.
std::uint64_t read_uint(const node_ref& value, std::uint64_t min, std::uint64_t max);

template <class T>
T read_uint_as(const node_ref& value, T min, T max) {
    return static_cast<T>(read_uint(value, min, max));
}

// One of `choices`, compared exactly.
std::string read_choice(const node_ref& value, std::initializer_list<std::string_view> choices);

// The position of the value among `choices`, compared exactly.
std::size_t read_choice_index(const node_ref& value, std::initializer_list<std::string_view> choices);

// Fails with "must be between MIN and MAX" unless min <= n <= max.
void check_range(const node_ref& value, std::uint64_t n, std::uint64_t min, std::uint64_t max);

}  // namespace sluice::config::schema
