#include "template/jinja.h"

#include "template/jinja_eval.h"
#include "template/jinja_lexer.h"
#include "template/jinja_parser.h"

namespace glint::jinja {

Template::Template(const std::string& source, std::string name) : name_(std::move(name)) {
  program_ = parse(tokenize(source, name_), name_);
}

Template::~Template() = default;
Template::Template(Template&&) noexcept = default;
Template& Template::operator=(Template&&) noexcept = default;

std::string Template::render(const nlohmann::ordered_json& context, const RenderOptions& options) const {
  GLINT_CHECK(context.is_object(), name_, ": the render context must be a JSON object, got ", context.type_name());
  Dict d;
  for (auto it = context.begin(); it != context.end(); ++it) d.set(it.key(), from_json(it.value()));
  return render(d, options);
}

std::string Template::render(const Dict& context, const RenderOptions& options) const {
  auto globals = std::make_shared<Scope>();
  install_globals(*globals, options.now);
  for (const auto& kv : context.items) {
    GLINT_CHECK(globals->vars.find(kv.first) == nullptr, name_, ": the render context may not redefine the global '",
                kv.first, "'");
    globals->set(kv.first, kv.second);
  }
  Interpreter in(name_);
  return in.render(program_, globals);
}

}  // namespace glint::jinja
