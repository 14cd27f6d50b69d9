#include "config/yaml_schema.hpp"

#include <charconv>
#include <set>
#include <vector>

#include "config/config.hpp"

namespace sluice::config::schema {

namespace {

constexpr std::string_view expected_mapping = "expected a mapping";
constexpr std::string_view expected_key = "expected a plain key";
constexpr std::string_view unknown_key = "unknown key";
constexpr std::string_view duplicate_key = "duplicate key";
constexpr std::string_view missing_key = "required key is missing";
constexpr std::string_view expected_uint = "expected a non-negative integer";
constexpr std::string_view expected_list = "expected a list";
constexpr std::string_view expected_bool = "expected true or false";

// Thrown by a describing node_ref where a loading one would report an error: the reader
// stops there, having declared what it declares before.
struct describe_stop {};

// yaml-cpp marks are 0-based; a null mark (no position known) reads as the file start.
int one_based(int n) { return n < 0 ? 1 : n + 1; }

const field* find_field(std::initializer_list<field> fields, std::string_view key) {
    for (const field& f : fields) {
        if (f.key == key) return &f;
    }
    return nullptr;
}

std::size_t index_of(std::initializer_list<field> fields, const field* f) {
    return static_cast<std::size_t>(f - fields.begin());
}

std::string range_reason(std::uint64_t min, std::uint64_t max) {
    return "must be between " + std::to_string(min) + " and " + std::to_string(max);
}

void check_missing(const node_ref& map, std::initializer_list<field> fields, const std::vector<bool>& seen) {
    for (const field& f : fields) {
        if (f.need == presence::required && !seen[index_of(fields, &f)]) {
            map.fail_at(map.mark(), map.path_of(f.key), missing_key);
        }
    }
}

// One `key: value` of `map`: the key must be known and not seen before.
void read_entry(const node_ref& map, std::initializer_list<field> fields, std::vector<bool>& seen,
                const YAML::Node& key, const YAML::Node& value) {
    const field* f = find_field(fields, key.Scalar());
    if (f == nullptr) map.fail_at(key.Mark(), map.path_of(key.Scalar()), unknown_key);
    std::size_t i = index_of(fields, f);
    if (seen[i]) map.fail_at(key.Mark(), map.path_of(key.Scalar()), duplicate_key);
    seen[i] = true;
    f->read(map.child(key, value));
}

// Calls `visit(key, value)` for each entry of a mapping (or of none, for an empty value),
// after checking that the key is a plain scalar.
template <class Visit>
void for_each_entry(const node_ref& map, Visit visit) {
    if (!map.is_null() && !map.node().IsMap()) map.fail(expected_mapping);
    if (!map.node().IsMap()) return;
    // yaml-cpp iterators yield pairs by value: copy them, never bind `it->first`.
    for (auto it = map.node().begin(); it != map.node().end(); ++it) {
        const YAML::Node key = it->first;
        const YAML::Node value = it->second;
        if (!key.IsScalar()) map.fail_at(key.Mark(), map.path(), expected_key);
        visit(key, value);
    }
}

}  // namespace

std::string position(const std::string& source, const YAML::Mark& mark, std::string_view path) {
    std::string what = source;
    what += ':' + std::to_string(one_based(mark.line));
    what += ':' + std::to_string(one_based(mark.column));
    what += ": ";
    what += path.empty() ? std::string_view("(root)") : path;
    return what;
}

void throw_error(const std::string& source, const YAML::Mark& mark, std::string_view path, std::string_view reason) {
    std::string what = position(source, mark, path);
    what += ": ";
    what += reason;
    throw config_error(what);
}

node_ref::node_ref(const YAML::Node& root, const std::string& source)
    : node_ref(root, std::string(), source, YAML::Mark::null_mark()) {}

node_ref::node_ref(const YAML::Node& node, std::string path, const std::string& source, YAML::Mark fallback,
                   std::vector<described_key>* described)
    : node_(node), path_(std::move(path)), source_(&source), fallback_(fallback), described_(described) {}

node_ref node_ref::describe_root(std::vector<described_key>& out) {
    static const std::string source = "(schema)";
    return node_ref(YAML::Node(YAML::NodeType::Map), std::string(), source, YAML::Mark::null_mark(), &out);
}

node_ref node_ref::described_child(std::string_view key) const {
    return node_ref(YAML::Node(), path_of(key), *source_, YAML::Mark::null_mark(), described_);
}

node_ref node_ref::described_items() const {
    return node_ref(YAML::Node(), path_ + "[]", *source_, YAML::Mark::null_mark(), described_);
}

YAML::Mark node_ref::mark() const {
    YAML::Mark own = node_.Mark();
    if (node_.IsNull() || own.is_null()) return fallback_;
    return own;
}

node_ref node_ref::item(const YAML::Node& value, std::size_t index) const {
    return node_ref(value, path_ + '[' + std::to_string(index) + ']', *source_, mark());
}

node_ref node_ref::child(const YAML::Node& key_node, const YAML::Node& value) const {
    return node_ref(value, path_of(key_node.Scalar()), *source_, key_node.Mark());
}

std::string node_ref::path_of(std::string_view key) const {
    if (path_.empty()) return std::string(key);
    std::string p = path_;
    p += '.';
    p += key;
    return p;
}

void node_ref::fail(std::string_view reason) const { fail_at(mark(), path_, reason); }

std::string node_ref::where() const { return position(*source_, mark(), path_); }

void node_ref::fail_at_key(std::string_view reason) const { fail_at(fallback_, path_, reason); }

void node_ref::fail_at(const YAML::Mark& mark, std::string_view path, std::string_view reason) const {
    if (describing()) throw describe_stop{};
    throw_error(*source_, mark, path, reason);
}

const std::string& node_ref::scalar(std::string_view expected) const {
    if (!node_.IsScalar()) fail(expected);
    return node_.Scalar();
}

namespace {

// Describes one value: records its path, then what its reader reads.
void describe_value(const node_ref& map, std::string_view key, const std::function<void(const node_ref&)>& read,
                    keep_fn restart_only = nullptr) {
    map.described().push_back({map.path_of(key), restart_only});
    try {
        read(map.described_child(key));
    } catch (const describe_stop&) {
    }
}

// Lists the fields, describes each value, then stops the reader: what follows its table
// checks values that describing has not read.
[[noreturn]] void describe_mapping(const node_ref& map, std::initializer_list<field> fields) {
    for (const field& f : fields) describe_value(map, f.key, f.read, f.restart_only);
    throw describe_stop{};
}

}  // namespace

void read_mapping(const node_ref& map, std::initializer_list<field> fields) {
    if (map.describing()) describe_mapping(map, fields);
    std::vector<bool> seen(fields.size(), false);
    for_each_entry(map,
                   [&](const YAML::Node& key, const YAML::Node& value) { read_entry(map, fields, seen, key, value); });
    check_missing(map, fields, seen);
}

void read_mapping(const node_ref& map, std::initializer_list<field> fields, std::string_view other_name,
                  const std::function<void(const std::string&, const node_ref&)>& other) {
    if (map.describing()) {
        for (const field& f : fields) describe_value(map, f.key, f.read, f.restart_only);
        const std::string placeholder = '<' + std::string(other_name) + '>';
        describe_value(map, placeholder, [&](const node_ref& v) { other(std::string(other_name), v); });
        throw describe_stop{};
    }
    std::vector<bool> seen(fields.size(), false);
    std::set<std::string> others;
    for_each_entry(map, [&](const YAML::Node& key, const YAML::Node& value) {
        if (find_field(fields, key.Scalar()) != nullptr) return read_entry(map, fields, seen, key, value);
        if (!others.insert(key.Scalar()).second) map.fail_at(key.Mark(), map.path_of(key.Scalar()), duplicate_key);
        other(key.Scalar(), map.child(key, value));
    });
    check_missing(map, fields, seen);
}

void read_entries(const node_ref& map, const std::function<void(const std::string&, const node_ref&)>& read,
                  std::string_view placeholder) {
    if (map.describing())
        return read(std::string(placeholder), map.described_child('<' + std::string(placeholder) + '>'));
    std::set<std::string> seen;
    for_each_entry(map, [&](const YAML::Node& key, const YAML::Node& value) {
        if (!seen.insert(key.Scalar()).second) {
            map.fail_at(key.Mark(), map.path_of(key.Scalar()), duplicate_key);
        }
        read(key.Scalar(), map.child(key, value));
    });
}

std::size_t read_sequence(const node_ref& seq, const std::function<void(const node_ref&)>& read) {
    if (seq.describing()) {
        read(seq.described_items());
        return 0;
    }
    if (!seq.is_null() && !seq.node().IsSequence()) seq.fail(expected_list);
    std::size_t n = 0;
    if (seq.node().IsSequence()) {
        for (YAML::Node item : seq.node()) read(seq.item(item, n++));
    }
    return n;
}

bool read_bool(const node_ref& value) {
    const std::string& text = value.scalar(expected_bool);
    if (text != "true" && text != "false") value.fail(expected_bool);
    return text == "true";
}

void check_range(const node_ref& value, std::uint64_t n, std::uint64_t min, std::uint64_t max) {
    if (n < min || n > max) value.fail(range_reason(min, max));
}

std::uint64_t read_uint(const node_ref& value, std::uint64_t min, std::uint64_t max) {
    const std::string& text = value.scalar(expected_uint);
    std::uint64_t n = 0;
    const char* end = text.data() + text.size();
    auto [ptr, ec] = std::from_chars(text.data(), end, n);
    // Too many digits for 64 bits is still a number, just out of range.
    if (ec == std::errc::result_out_of_range && ptr == end) value.fail(range_reason(min, max));
    if (text.empty() || ec != std::errc() || ptr != end) value.fail(expected_uint);
    check_range(value, n, min, max);
    return n;
}

std::size_t read_choice_index(const node_ref& value, std::initializer_list<std::string_view> choices) {
    std::string list;
    for (std::string_view c : choices) {
        list += list.empty() ? "" : ", ";
        list += c;
    }
    const std::string& text = value.scalar("expected one of " + list);
    for (std::size_t i = 0; i < choices.size(); ++i) {
        if (text == choices.begin()[i]) return i;
    }
    value.fail("must be one of " + list);
}

std::vector<described_key> describe(const std::function<void(const node_ref&)>& read_root) {
    std::vector<described_key> out;
    try {
        read_root(node_ref::describe_root(out));
    } catch (const describe_stop&) {
    }
    return out;
}

std::string read_choice(const node_ref& value, std::initializer_list<std::string_view> choices) {
    return std::string(choices.begin()[read_choice_index(value, choices)]);
}

}  // namespace sluice::config::schema
