// BOOST_ASSERT handler of the fuzz build (BOOST_ENABLE_ASSERT_HANDLER): abort like the
// default, except for assertions known to be wrong in Boost 1.81, whose code goes on to
// do the right thing (as in every NDEBUG build). Sluice's Debug builds still trip them.
#include <boost/assert.hpp>

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace {

struct known_wrong {
    const char* file;      // a suffix of __FILE__
    const char* function;  // a substring of BOOST_CURRENT_FUNCTION
    const char* expr;      // the assertion's text, or nullptr for any in that function
};

constexpr known_wrong tolerated[] = {
    // "0\r\n" then "\r" is a valid arrival of a last chunk (n == 4 < 5): boostorg/beast#2861,
    // fixed in Boost 1.86. tests/fuzz/regressions/fuzz_chunked/beast_last_chunk_split.
    {"beast/http/impl/basic_parser.ipp", "parse_chunk_header", "n >= 5"},
    // parse_uri("l:\"") asserts on the way to its correct "leftover" error:
    // boostorg/url#665, fixed in Boost 1.82. tests/fuzz/regressions/fuzz_config/url_quote.yaml.
    {"boost/url/detail/path.hpp", "path_segments", nullptr},
};

bool ends_with(const char* s, const char* suffix) {
    const std::size_t n = std::strlen(s), m = std::strlen(suffix);
    return n >= m && std::strcmp(s + n - m, suffix) == 0;
}

}  // namespace

namespace boost {

void assertion_failed(const char* expr, const char* function, const char* file, long line) {
    for (const auto& k : tolerated)
        if (ends_with(file, k.file) && std::strstr(function, k.function) != nullptr &&
            (k.expr == nullptr || std::strcmp(expr, k.expr) == 0))
            return;
    std::fprintf(stderr, "%s:%ld: %s: Assertion `%s' failed.\n", file, line, function, expr);
    std::abort();
}

void assertion_failed_msg(const char* expr, const char* msg, const char* function, const char* file, long line) {
    std::fprintf(stderr, "%s:%ld: %s: Assertion `%s' failed: %s\n", file, line, function, expr, msg);
    std::abort();
}

}  // namespace boost
