// Definitions that Ganesha's inline XDR functions (nfsv41.h) refer to and the Ganesha
// server would provide: its log (LogDebug, LogMallocFailure) and a server-side READ
// encoder. The client links none of the server, so these stand in for them.
#include <cstdio>
#include <cstdlib>

#include "compound_bridge/client/nfs4_xdr.h"

namespace {
// Every component's level is NIV_NULL, so the LogDebug calls in nfsv41.h's decoders
// test false and never call DisplayLogComponentLevel.
log_levels_t no_logging[COMPONENT_COUNT] = {};
}  // namespace

extern "C" {

log_levels_t *component_log_level = no_logging;

void DisplayLogComponentLevel(log_components_t, const char *, int, const char *, log_levels_t,
                              const char *, ...) {}

void LogMallocFailure(const char *file, int line, const char *function, const char *allocator) {
  std::fprintf(stderr, "txnfs-nfs: out of memory in %s (%s at %s:%d)\n", function, allocator, file,
               line);
  std::abort();
}

// Only READ4res's *encoder* (the server's reply) calls this; the client only decodes.
xdr_uio *xdr_READ4res_uio_setup(READ4resok *) {
  std::fprintf(stderr, "txnfs-nfs: internal error: READ4res encoded by the client\n");
  std::abort();
}

}  // extern "C"
