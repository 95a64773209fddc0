// A SAX handler that builds the tree itself, so that it sees every key before it is stored.
#include "config/json_document.hpp"

#include <algorithm>
#include <cctype>
#include <cstddef>
#include <optional>
#include <vector>

#include "zoe/core/error.hpp"
#include "zoe/core/str.hpp"

namespace zoe::engine::detail {

std::string join_key(std::string_view parent, std::string_view key) {
  if (parent.empty()) return std::string(key);
  return str(parent, '.', key);
}

namespace {

class tree_builder : public nlohmann::json_sax<json> {
 public:
  tree_builder(std::string_view text, std::string_view origin) : text_(text), origin_(origin) {}

  bool null() override { return add(json(nullptr)); }
  bool boolean(bool v) override { return add(json(v)); }
  bool number_integer(number_integer_t v) override { return add(json(v)); }
  bool number_unsigned(number_unsigned_t v) override { return add(json(v)); }
  bool number_float(number_float_t v, const string_t& /*unused*/) override { return add(json(v)); }
  bool string(string_t& v) override { return add(json(std::move(v))); }
  bool binary(binary_t& /*unused*/) override { return add(json(nullptr)); }

  bool start_object(std::size_t /*unused*/) override { return open(json::object()); }
  bool start_array(std::size_t /*unused*/) override { return open(json::array()); }
  bool end_object() override { return close(); }
  bool end_array() override { return close(); }

  bool key(string_t& k) override {
    json& object = *stack_.back().node;
    if (object.contains(k)) {
      throw config_error(str(origin_, ": ", join_key(stack_.back().path, k),
                             ": duplicate key (each key may appear once in an object; remove one of them)"));
    }
    pending_key_ = std::move(k);
    return true;
  }

  bool parse_error(std::size_t position, const std::string& last_token,
                   const nlohmann::detail::exception& ex) override {
    const auto [line, column] = line_and_column(position);
    std::string where = stack_.empty() ? std::string("the document") : current_path();
    if (where.empty()) where = "the top level";
    std::string what;
    if (const std::string_view word = word_ending_at(position); is_non_finite(word)) {
      what = str(word, " is not a JSON number (NaN and Infinity are not allowed; write a finite number)");
    } else if (ex.id == 406) {  // nlohmann's "number overflow"
      what = str("number '", last_token, "' is out of range (it must fit a double)");
    } else {
      what = strip_prefix(ex.what());
    }
    throw config_error(str(origin_, ':', line, ':', column, ": in ", where, ": ", what));
  }

  json take() { return std::move(root_); }

 private:
  struct frame {
    json* node;
    std::string path;
  };

  // Where the next value goes, and the key path it is read under.
  std::string current_path() const {
    const frame& top = stack_.back();
    if (top.node->is_array()) return str(top.path, '[', top.node->size(), ']');
    return pending_key_ ? join_key(top.path, *pending_key_) : top.path;
  }

  bool add(json value) {
    place(std::move(value));
    return true;
  }

  json* place(json value) {
    if (stack_.empty()) {
      root_ = std::move(value);
      return &root_;
    }
    json& parent = *stack_.back().node;
    if (parent.is_array()) {
      parent.push_back(std::move(value));
      return &parent.back();
    }
    json& slot = parent[*pending_key_];
    slot = std::move(value);
    pending_key_.reset();
    return &slot;
  }

  bool open(json container) {
    std::string path = stack_.empty() ? std::string() : current_path();
    json* node = place(std::move(container));
    stack_.push_back(frame{node, std::move(path)});
    return true;
  }

  bool close() {
    stack_.pop_back();
    return true;
  }

  std::pair<std::size_t, std::size_t> line_and_column(std::size_t position) const {
    // nlohmann counts the characters read; the offending one is the last of them.
    const std::size_t end = std::min(position, text_.size());
    const std::string_view read = text_.substr(0, end == 0 ? 0 : end - 1);
    const std::size_t line = 1 + static_cast<std::size_t>(std::count(read.begin(), read.end(), '\n'));
    const std::size_t last_newline = read.rfind('\n');
    const std::size_t column = last_newline == std::string_view::npos ? read.size() + 1 : read.size() - last_newline;
    return {line, column};
  }

  // The bare word around the character the lexer stopped at (it stops at the first letter of
  // NaN, so its token alone does not say which word it was).
  std::string_view word_ending_at(std::size_t position) const {
    const auto is_word = [](char c) {
      return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '-' || c == '+';
    };
    std::size_t offset = std::min(position, text_.size());
    while (offset > 0 && is_word(text_[offset - 1])) --offset;
    std::size_t end = offset;
    while (end < text_.size() &&
           (std::isalnum(static_cast<unsigned char>(text_[end])) != 0 || text_[end] == '-' || text_[end] == '+')) {
      ++end;
    }
    return text_.substr(offset, end - offset);
  }

  // Python's json module writes these for float('nan') and float('inf').
  static bool is_non_finite(std::string_view word) {
    return word == "NaN" || word == "Infinity" || word == "-Infinity" || word == "+Infinity" || word == "-NaN";
  }

  // "[json.exception.parse_error.101] parse error at line 1, column 2: syntax error ..." ->
  // "syntax error ..." (the position is given in zoe's own form).
  static std::string strip_prefix(std::string_view message) {
    const std::size_t column = message.find("column ");
    if (column == std::string_view::npos) return std::string(message);
    const std::size_t colon = message.find(": ", column);
    if (colon == std::string_view::npos) return std::string(message);
    return std::string(message.substr(colon + 2));
  }

  std::string_view text_;
  std::string_view origin_;
  json root_;
  std::vector<frame> stack_;
  std::optional<std::string> pending_key_;
};

}  // namespace

json read_json_document(std::string_view text, std::string_view origin) {
  tree_builder builder(text, origin);
  json::sax_parse(text, &builder);
  return builder.take();
}

}  // namespace zoe::engine::detail
