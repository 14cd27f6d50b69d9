// The file as a whole: one YAML document whose top-level keys are the sections, read in
// document order, then the checks that span sections (plans, route costs). Also what the
// schema declares: its keys, and which of them take effect only at a restart.
#include <algorithm>
#include <sstream>

#include <yaml-cpp/eventhandler.h>

#include "config/readers.hpp"
#include "config/stable_file.hpp"

namespace sluice::config {

namespace detail {

namespace {

void read_config(const node_ref& root, config& out) {
    if (!root.node().IsMap()) root.fail("expected a mapping");
    std::vector<route_nodes> route_nodes;
    read_mapping(root, {
                           {"server", [&](const node_ref& v) { read_server(v, out.server); }},
                           {"admin", [&](const node_ref& v) { read_admin(v, out.admin); }},
                           {"upstream", [&](const node_ref& v) { read_upstream(v, out.upstreams); }},
                           {"upstreams", [&](const node_ref& v) { read_upstreams(v, out.upstreams); }},
                           {"proxy", [&](const node_ref& v) { read_proxy(v, out.proxy); }},
                           {"log", [&](const node_ref& v) { read_log(v, out.log); }},
                           {"store", [&](const node_ref& v) { read_store(v, out.store); }},
                           {"clients", [&](const node_ref& v) { read_clients(v, out.clients); }},
                           {"response", [&](const node_ref& v) { read_response(v, out.response); }},
                           {"plans", [&](const node_ref& v) { read_plans(v, out.plans); }},
                           {"policies", [&](const node_ref& v) { read_policies(v, out.policies); }},
                           {"routes", [&](const node_ref& v) { read_routes(v, out.routes, route_nodes); }},
                           {"service", [&](const node_ref& v) { read_service(v, out.service); }},
                       });
    check_upstreams(root, out, route_nodes);
    check_plans(out);
    check_routes(out, route_nodes);
    check_tls(out);
}

// Counts documents, stopping at the second: yaml-cpp 0.7's LoadAll() never ends on some
// malformed input (a lone ",": it yields empty documents without consuming anything).
class document_counter : public YAML::EventHandler {
public:
    int documents = 0;
    YAML::Mark second{};
    void OnDocumentStart(const YAML::Mark& mark) override {
        if (++documents == 2) second = mark;
    }
    void OnDocumentEnd() override {}
    void OnNull(const YAML::Mark&, YAML::anchor_t) override {}
    void OnAlias(const YAML::Mark&, YAML::anchor_t) override {}
    void OnScalar(const YAML::Mark&, const std::string&, YAML::anchor_t, const std::string&) override {}
    void OnSequenceStart(const YAML::Mark&, const std::string&, YAML::anchor_t, YAML::EmitterStyle::value) override {}
    void OnSequenceEnd() override {}
    void OnMapStart(const YAML::Mark&, const std::string&, YAML::anchor_t, YAML::EmitterStyle::value) override {}
    void OnMapEnd() override {}
};

std::vector<schema::described_key> describe_schema() {
    return schema::describe([](const node_ref& root) {
        config unused;
        read_config(root, unused);
    });
}

}  // namespace

YAML::Node parse_document(const std::string& text, const std::string& name) {
    try {
        std::istringstream in(text);
        YAML::Parser parser(in);
        document_counter counter;
        while (counter.documents < 2 && parser.HandleNextDocument(counter)) {
        }
        if (counter.documents > 1) schema::throw_error(name, counter.second, "(yaml)", expected_single_document);
        return YAML::Load(text);
    } catch (const YAML::Exception& e) {
        schema::throw_error(name, e.mark, "(yaml)", e.msg);
    }
}

}  // namespace detail

using detail::node_ref;

const plan_config* config::find_plan(std::string_view name) const {
    auto it = std::find_if(plans.begin(), plans.end(), [&](const plan_config& p) { return p.name == name; });
    return it == plans.end() ? nullptr : &*it;
}

const upstream_config* config::find_upstream(std::string_view name) const {
    if (name.empty()) name = "default";
    auto it =
        std::find_if(upstreams.begin(), upstreams.end(), [&](const upstream_config& u) { return u.name == name; });
    return it == upstreams.end() ? nullptr : &*it;
}

const policy_config* config::find_policy(std::string_view name) const {
    auto it = std::find_if(policies.begin(), policies.end(), [&](const policy_config& p) { return p.name == name; });
    return it == policies.end() ? nullptr : &*it;
}

std::shared_ptr<const config> load_string(std::string_view yaml, const std::string& name) {
    YAML::Node doc = detail::parse_document(std::string(yaml), name);
    auto out = std::make_shared<config>();
    out->source = name;
    detail::read_config(node_ref(doc, name), *out);
    return out;
}

std::shared_ptr<const config> load_file(const std::string& path) { return load_string(read_stable_file(path), path); }

std::vector<std::string> schema_keys() {
    std::vector<std::string> out;
    for (auto& k : detail::describe_schema()) out.push_back(std::move(k.path));
    return out;
}

const std::vector<restart_only_key>& restart_only_keys() {
    static const std::vector<restart_only_key> keys = [] {
        std::vector<restart_only_key> out;
        for (auto& k : detail::describe_schema()) {
            if (k.restart_only != nullptr) out.push_back({std::move(k.path), k.restart_only});
        }
        return out;
    }();
    return keys;
}

}  // namespace sluice::config
