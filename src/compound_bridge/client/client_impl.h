// Client's state, shared by client.cc and compound.cc: its Session.
#pragma once
#include "compound_bridge/client/nfs_client.h"
#include "compound_bridge/client/session.h"

namespace txnfs::nfs {

struct Client::Impl {
  explicit Impl(const ClientOptions &options) : session(options) {}
  Session session;
};

}  // namespace txnfs::nfs
