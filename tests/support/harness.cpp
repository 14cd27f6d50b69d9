#include "harness.hpp"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <stdexcept>

namespace sluice::test {

namespace {

std::uint16_t parse_port(const std::string& s) {
    unsigned long v = std::stoul(s);
    if (v == 0 || v > 65535) throw std::runtime_error("invalid port in log line: " + s);
    return static_cast<std::uint16_t>(v);
}

// Whether the YAML text has server.tls in block style: a line "  tls:" (any indentation)
// among the indented lines that follow "server:".
bool has_server_tls(const std::string& yaml) {
    std::istringstream in(yaml);
    std::string line;
    bool in_server = false;
    while (std::getline(in, line)) {
        if (line.empty() || line[0] == '#') continue;
        if (line[0] != ' ') {
            in_server = line.rfind("server:", 0) == 0;
            continue;
        }
        const auto first = line.find_first_not_of(' ');
        if (in_server && line.compare(first, 4, "tls:") == 0) return true;
    }
    return false;
}

struct yaml_node {
    std::string key;
    std::optional<std::string> value;
    std::vector<yaml_node> children;
};

void yaml_set(std::vector<yaml_node>& level, std::string_view path, const std::string& value) {
    auto dot = path.find('.');
    std::string key(path.substr(0, dot));
    if (key.empty()) throw std::invalid_argument("gateway_yaml: empty key in path");
    yaml_node* node = nullptr;
    for (auto& n : level)
        if (n.key == key) node = &n;
    if (!node) {
        level.push_back(yaml_node{key, std::nullopt, {}});
        node = &level.back();
    }
    if (dot == std::string_view::npos) {
        node->value = value;
        node->children.clear();
    } else {
        node->value.reset();
        yaml_set(node->children, path.substr(dot + 1), value);
    }
}

void yaml_emit(const std::vector<yaml_node>& level, int indent, std::string& out) {
    for (const auto& n : level) {
        out.append(static_cast<std::size_t>(indent), ' ');
        out += n.key + ":";
        if (n.value) {
            out += " " + *n.value + "\n";
        } else {
            out += "\n";
            yaml_emit(n.children, indent + 2, out);
        }
    }
}

}  // namespace

std::string sluice_bin() {
    if (const char* e = std::getenv("SLUICE_TEST_GATEWAY_BIN"); e && *e) return e;
#ifdef SLUICE_BIN
    return SLUICE_BIN;
#else
    throw std::runtime_error("SLUICE_BIN is not defined for this test binary");
#endif
}

std::string upstream_bin() {
    if (const char* e = std::getenv("SLUICE_TEST_UPSTREAM_BIN"); e && *e) return e;
#ifdef SLUICE_UPSTREAM_BIN
    return SLUICE_UPSTREAM_BIN;
#else
    throw std::runtime_error("SLUICE_UPSTREAM_BIN is not defined for this test binary");
#endif
}

std::string make_temp_dir() {
    std::string tmpl = "/tmp/sluice-e2e-XXXXXX";
    if (!::mkdtemp(tmpl.data())) throw std::runtime_error(std::string("mkdtemp: ") + std::strerror(errno));
    return tmpl;
}

void write_file(const std::string& path, const std::string& text) {
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    f << text;
    f.close();
    if (!f) throw std::runtime_error("cannot write " + path);
}

std::unique_ptr<upstream_server> start_upstream() {
    auto up = std::make_unique<upstream_server>(std::vector<std::string>{upstream_bin(), "--listen", "127.0.0.1:0"});
    auto groups = up->proc.wait_for_line(R"(^listening on 127\.0\.0\.1:(\d+)$)");
    up->port = parse_port(groups.at(1));
    return up;
}

std::unique_ptr<upstream_server> start_upstream(std::vector<std::string> extra_args) {
    std::vector<std::string> argv{upstream_bin(), "--listen", "127.0.0.1:0"};
    argv.insert(argv.end(), extra_args.begin(), extra_args.end());
    auto up = std::make_unique<upstream_server>(std::move(argv));
    auto groups = up->proc.wait_for_line(R"(^listening on \S+:(\d+)$)");
    up->port = parse_port(groups.at(1));
    return up;
}

gateway::~gateway() {
    proc.reset();
    if (!dir.empty() && !std::getenv("SLUICE_TEST_KEEP_TMP")) {
        std::error_code ec;
        std::filesystem::remove_all(dir, ec);
    }
}

std::unique_ptr<gateway> launch_gateway(const std::string& yaml_text, std::vector<std::string> extra_args,
                                        env_list extra_env) {
    auto g = std::make_unique<gateway>();
    g->dir = make_temp_dir();
    g->config_path = g->dir + "/sluice.yaml";
    write_file(g->config_path, yaml_text);
    std::vector<std::string> argv{sluice_bin(), "--config", g->config_path};
    argv.insert(argv.end(), extra_args.begin(), extra_args.end());
    g->proc = std::make_unique<process>(std::move(argv), std::move(extra_env));
    return g;
}

std::unique_ptr<gateway> start_gateway(const std::string& yaml_text, std::vector<std::string> extra_args,
                                       env_list extra_env) {
    auto g = launch_gateway(yaml_text, std::move(extra_args), std::move(extra_env));
    g->port = parse_port(g->proc->wait_for_line(R"(proxy listening on 127\.0\.0\.1:(\d+))").at(1));
    g->admin_port = parse_port(g->proc->wait_for_line(R"(admin listening on 127\.0\.0\.1:(\d+))").at(1));
    if (has_server_tls(yaml_text))
        g->tls_port = parse_port(g->proc->wait_for_line(R"(TLS listening on 127\.0\.0\.1:(\d+))").at(1));
    return g;
}

std::string gateway_yaml(std::uint16_t upstream_port, const yaml_overrides& overrides, const std::string& extra) {
    std::vector<yaml_node> root;
    yaml_set(root, "server.listen", "\"127.0.0.1:0\"");
    yaml_set(root, "server.threads", "2");
    yaml_set(root, "admin.listen", "\"127.0.0.1:0\"");
    yaml_set(root, "upstream.url", "\"http://127.0.0.1:" + std::to_string(upstream_port) + "\"");
    yaml_set(root, "log.level", "info");
    for (const auto& [path, value] : overrides) yaml_set(root, path, value);
    std::string out;
    yaml_emit(root, 0, out);
    if (!extra.empty()) {
        out += extra;
        if (out.back() != '\n') out += "\n";
    }
    return out;
}

}  // namespace sluice::test
