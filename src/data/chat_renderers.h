// The chat template families chat_template.h names, rendered natively (internal header).
// Each checks the roles and fields it can render and throws ConfigError (starting with
// `origin`) for the others.
#pragma once

#include <string>

#include "topotrain/data/chat_template.h"

namespace topotrain::data::detail {

RenderedChat render_chatml(const ChatConversation& conversation, const std::string& origin);
RenderedChat render_qwen3(const ChatConversation& conversation, const std::string& origin);
RenderedChat render_qwen2_5(const ChatConversation& conversation, const std::string& origin);
RenderedChat render_llama3(const ChatConversation& conversation, const std::string& origin,
                           const std::string& bos_token);

}  // namespace topotrain::data::detail
