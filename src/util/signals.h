// Stop requests from signals. SIGINT or SIGTERM ask every long loop (training, evaluation) to
// finish its current unit of work and leave cleanly; a second Ctrl-C leaves at once (130).
#pragma once

namespace ropelab::signals {

void install_handlers();
// True after SIGINT/SIGTERM (polled by every long loop).
bool stop_requested();

}  // namespace ropelab::signals
