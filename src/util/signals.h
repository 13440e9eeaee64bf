// Stop requests from signals. SIGINT, SIGTERM or SIGHUP ask every long loop (training,
// evaluation) to finish its current unit of work and leave cleanly; a second Ctrl-C leaves at
// once (130). SIGXFSZ is ignored, so a file-size limit is a write error like a full disk.
#pragma once

namespace ropelab::signals {

void install_handlers();
// True after SIGINT/SIGTERM/SIGHUP (polled by every long loop).
bool stop_requested();

}  // namespace ropelab::signals
