// HTTP/1 message heads parsed without http::fields: the parser records the start line and
// header fields into a reusable `message_head`, and hands body bytes to a `body_sink`
// that re-frames them for the next hop. Framing headers are never forwarded as received.
//
// Thread: a parser and its head belong to one session on one worker thread.
#pragma once

#include <boost/beast/http/basic_parser.hpp>
#include <boost/beast/http/field.hpp>
#include <boost/beast/http/verb.hpp>

#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

namespace sluice::http {

namespace bhttp = boost::beast::http;

struct header_field {
    bhttp::field name;  // field::unknown for names Beast does not know
    std::uint32_t name_off, name_len, value_off, value_len;
};

// The start line and fields of one message, stored in one string so that parsing a
// message allocates nothing once the capacity is warm.
class message_head {
public:
    void clear();
    void add(bhttp::field f, std::string_view name, std::string_view value);
    void set_request_line(bhttp::verb v, std::string_view method, std::string_view target, unsigned version);
    void set_status_line(unsigned status, std::string_view reason, unsigned version);

    std::string_view name(const header_field& h) const { return {text_.data() + h.name_off, h.name_len}; }
    std::string_view value(const header_field& h) const { return {text_.data() + h.value_off, h.value_len}; }
    const std::vector<header_field>& fields() const { return fields_; }
    // First value of a field, "" when absent.
    std::string_view find(bhttp::field f) const;
    std::size_t count(bhttp::field f) const;

    bhttp::verb method = bhttp::verb::unknown;
    std::string_view method_text() const { return {text_.data(), method_len_}; }
    std::string_view target() const { return {text_.data() + method_len_, target_len_}; }
    unsigned status = 0;
    std::string_view reason() const { return {text_.data(), reason_len_}; }
    unsigned version = 11;  // 10 or 11

private:
    std::string text_;
    std::vector<header_field> fields_;
    std::uint32_t method_len_ = 0, target_len_ = 0, reason_len_ = 0;
};

// Receives body bytes in the framing chosen for the next hop. Appends to `out`, which the
// owner flushes to the socket whenever it grows past a bound or the parser needs input.
class body_sink {
public:
    enum class framing { none, identity, chunked };
    std::string* out = nullptr;
    framing mode = framing::identity;
    std::uint64_t bytes = 0;

    void data(std::string_view piece);
    void finish();  // the terminating chunk when chunked
};

// Faulty framing, refused whatever Beast would accept. RFC 9112 section 6.1: an HTTP/1.0
// request with Transfer-Encoding is faulty (a 1.0 hop may not know chunked).
enum class framing_error { none, transfer_encoding_not_chunked, both_length_and_chunked, transfer_encoding_in_http10 };

template <bool IsRequest>
class parser final : public bhttp::basic_parser<IsRequest> {
public:
    parser(message_head& head, body_sink& sink) : head_(head), sink_(sink) { head_.clear(); }
    framing_error framing() const { return framing_error_; }
    // The body may hold at most `max` bytes: a declared Content-Length or the chunk sizes
    // seen so far past it fail with bhttp::error::body_limit. Use instead of Beast's
    // body_limit(), which 1.81 counts again each time a chunk header arrives in pieces.
    void limit_body(std::uint64_t max) { max_body_ = max; }
    bool expect_continue() const { return expect_continue_; }
    bool has_expect() const { return has_expect_; }

private:
    using base = bhttp::basic_parser<IsRequest>;
    using error_code = boost::beast::error_code;
    using bsv = boost::beast::string_view;

    void on_request_impl(bhttp::verb v, bsv method, bsv target, int version, error_code& ec) override;
    void on_response_impl(int status, bsv reason, int version, error_code& ec) override;
    void on_field_impl(bhttp::field f, bsv name, bsv value, error_code& ec) override;
    void on_header_impl(error_code& ec) override;
    void on_body_init_impl(const boost::optional<std::uint64_t>& length, error_code& ec) override;
    std::size_t on_body_impl(bsv body, error_code& ec) override;
    void on_chunk_header_impl(std::uint64_t size, bsv extensions, error_code& ec) override;
    std::size_t on_chunk_body_impl(std::uint64_t remain, bsv body, error_code& ec) override;
    void on_finish_impl(error_code& ec) override;

    message_head& head_;
    body_sink& sink_;
    framing_error framing_error_ = framing_error::none;
    bool seen_length_ = false, seen_te_ = false;
    bool expect_continue_ = false, has_expect_ = false;
    std::uint64_t max_body_ = std::numeric_limits<std::uint64_t>::max(), chunked_total_ = 0;
};

using request_parser = parser<true>;
using response_parser = parser<false>;

}  // namespace sluice::http
