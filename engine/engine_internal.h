// engine/engine_internal.h — engine-side access to the objects behind the public facades,
// for code inside engine/ (e.g. a DSpark decoder plugged into the generation loop) that needs
// the session internals (hidden capture, prefix commits). Frontends must not include this.
#pragma once

#include "engine/engine.h"
#include "session/session.h"

namespace ds4::speculative {
class DrafterModel;
}  // namespace ds4::speculative

namespace ds4 {

// The ModelSession behind a Session made by Engine::new_session(); nullptr for any other
// Session implementation.
session::ModelSession* model_session(Session& s);

// The DSpark drafter weights of an engine opened with a support GGUF; nullptr without one (or
// for an Engine that Engine::open did not make). Shared: each user keeps its own Drafter.
const speculative::DrafterModel* engine_drafter(Engine& e);

}  // namespace ds4
