// admin.token_file and admin.open: the token read and trimmed, every bad file or value at
// its key (FILE:LINE:COLUMN: key.path: reason), and an admin listener off loopback refused
// without a token.
#include <doctest/doctest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "config/config.hpp"
#include "load_error.hpp"

namespace cfg = sluice::config;
using sluice::config::testing::error_of;

namespace {

struct temp_dir {
    temp_dir() {
        char tmpl[] = "/tmp/sluice-admin-config-XXXXXX";
        path = ::mkdtemp(tmpl);
    }
    ~temp_dir() { std::filesystem::remove_all(path); }
    std::string write(const std::string& name, const std::string& text) const {
        const std::string file = path + "/" + name;
        std::ofstream(file) << text;
        return file;
    }
    std::string path;
};

std::string yaml(const std::string& admin) { return "upstream: {url: 'http://h'}\nadmin:\n" + admin; }

}  // namespace

TEST_CASE("admin: the token file's token, trimmed, and the open paths") {
    temp_dir d;
    const auto file = d.write("token", "  s3cret-token_0123456789~+/==\r\n\n");
    auto c = cfg::load_string(yaml("  listen: '0.0.0.0:9090'\n  token_file: '" + file + "'\n"), "inline.yaml");
    CHECK(c->admin.token == "s3cret-token_0123456789~+/==");
    CHECK(c->admin.token_file == file);
    CHECK(c->admin.open == std::vector<std::string>{"/healthz", "/readyz", "/metrics"});

    c = cfg::load_string(yaml("  token_file: '" + file + "'\n  open: [/metrics, /top]\n"), "inline.yaml");
    CHECK(c->admin.open == std::vector<std::string>{"/metrics", "/top"});
    c = cfg::load_string(yaml("  token_file: '" + file + "'\n  open: []\n"), "inline.yaml");
    CHECK(c->admin.open.empty());

    // Without a token file: no token, loopback only.
    c = cfg::load_string(yaml("  listen: '[::1]:9090'\n"), "inline.yaml");
    CHECK(c->admin.token.empty());
    c = cfg::load_string(yaml("  listen: '127.0.0.2:9090'\n"), "inline.yaml");
    CHECK(c->admin.listen.host == "127.0.0.2");
}

TEST_CASE("admin: a token file relative to the config file's directory") {
    temp_dir d;
    d.write("admin.token", "0123456789abcdef0123\n");
    const auto config = d.write("sluice.yaml", yaml("  token_file: admin.token\n"));
    auto c = cfg::load_file(config);
    CHECK(c->admin.token == "0123456789abcdef0123");
}

TEST_CASE("admin: a listener off loopback without a token file is refused at admin.listen") {
    CHECK(error_of(yaml("  listen: '0.0.0.0:9090'\n")) ==
          "inline.yaml:3:11: admin.listen: an address other than loopback needs admin.token_file: without a token "
          "anyone who reaches it could reset counters, block callers and reload");
    CHECK(error_of(yaml("  listen: '[::]:9090'\n")).starts_with("inline.yaml:3:11: admin.listen: an address other"));
    CHECK(error_of(yaml("  listen: '10.1.2.3:9090'\n")).starts_with("inline.yaml:3:11: admin.listen: an address"));
}

TEST_CASE("admin: a token file that is missing, empty or holds no token is an error at admin.token_file") {
    temp_dir d;
    const std::string bad_token =
        "the file must hold one bearer token of 16 to 4096 characters: letters, digits, '-', '.', '_', '~', '+', "
        "'/', then any '=' (blanks and line ends around it are trimmed)";
    CHECK(error_of(yaml("  token_file: '" + d.path + "/absent'\n")) ==
          "inline.yaml:3:15: admin.token_file: " + d.path + "/absent: cannot read: No such file or directory");
    CHECK(error_of(yaml("  token_file: '" + d.write("empty", "\n \n") + "'\n")) ==
          "inline.yaml:3:15: admin.token_file: " + bad_token);
    CHECK(error_of(yaml("  token_file: '" + d.write("short", "0123456789abcde\n") + "'\n")) ==
          "inline.yaml:3:15: admin.token_file: " + bad_token);
    CHECK(error_of(yaml("  token_file: '" + d.write("two", "0123456789abcdef\n0123456789abcdef\n") + "'\n")) ==
          "inline.yaml:3:15: admin.token_file: " + bad_token);
    CHECK(error_of(yaml("  token_file: '" + d.write("inner", "0123456789=abcdef\n") + "'\n")) ==
          "inline.yaml:3:15: admin.token_file: " + bad_token);
    CHECK(error_of(yaml("  token_file: ''\n")) == "inline.yaml:3:15: admin.token_file: must not be empty");
}

TEST_CASE("admin: open takes the read-only paths, each once") {
    temp_dir d;
    const auto file = d.write("token", "0123456789abcdef0123\n");
    const auto with = [&](const std::string& open) {
        return error_of(yaml("  token_file: '" + file + "'\n  open: " + open + "\n"));
    };
    CHECK(with("[/healthz, /reload]") ==
          "inline.yaml:4:20: admin.open[1]: must be one of /healthz, /readyz, /metrics, /top, /upstreams");
    CHECK(with("[/metrics, /metrics]") == "inline.yaml:4:20: admin.open[1]: listed twice");
    CHECK(with("/metrics") == "inline.yaml:4:9: admin.open: expected a list");
}
