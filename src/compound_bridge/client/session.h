// Session: the NFSv4.1 state of one connection -- client id, session id, slot 0's
// sequence id, the open owner -- and the one way to send a COMPOUND.
//
// Setup (constructor): EXCHANGE_ID; CREATE_SESSION asking for ClientOptions' sizes (one
// slot, no back channel); SEQUENCE+RECLAIM_COMPLETE; SEQUENCE+PUTROOTFH+LOOKUP(export)+
// GETATTR(maxread, maxwrite). Teardown (close): DESTROY_SESSION, DESTROY_CLIENTID.
//
// A COMPOUND's operations are one contiguous array whose element 0 is SEQUENCE
// (sequence() fills it in just before the call). The operation array is encoded by a
// loop here, not by Ganesha's xdr_COMPOUND4args/res: those go through xdr_array with
// XDR_ARRAY_MAXLEN (1024) elements, and the client sends and reads more.
#pragma once
#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "compound_bridge/client/nfs4_xdr.h"
#include "compound_bridge/client/nfs_client.h"
#include "compound_bridge/client/rpc_transport.h"

namespace txnfs::nfs {

// The decoded reply of one COMPOUND; owns (and frees) what the decoder allocated.
struct Reply {
  nfsstat4 status = NFS4_OK;
  utf8str_cs tag{};
  std::vector<nfs_resop4> results;  // the failing operation's is the last

  Reply() = default;
  Reply(const Reply &) = delete;
  Reply &operator=(const Reply &) = delete;
  ~Reply() { clear(); }
  void clear();
};

// The status in an operation's result (every NFSv4 result starts with one).
nfsstat4 result_status(const nfs_resop4 &res);

class Session {
 public:
  explicit Session(const ClientOptions &options);  // throws Error
  ~Session();
  Session(const Session &) = delete;
  Session &operator=(const Session &) = delete;

  // Best effort, never throws; idempotent.
  void close();

  const ClientOptions &options() const { return options_; }
  const SessionLimits &limits() const { return limits_; }
  // The export's path in the pseudo file system, one component per LOOKUP.
  const std::vector<std::string> &export_components() const { return export_; }
  clientid4 clientid() const { return clientid_; }
  // The open owner of every OPEN this session sends. Open owners are per client id, so
  // one short constant does (and keeps request sizes the same from run to run).
  static constexpr std::string_view kOpenOwner = "txnfs-nfs";

  // SEQUENCE on slot 0 with the next sequence id.
  nfs_argop4 sequence() const;
  // Bytes of SEQUENCE, as encoded (its size is fixed).
  size_t sequence_bytes() const { return sequence_bytes_; }
  // Bytes of the RPC call of a COMPOUND with TAG whose operations encode to OPS_BYTES.
  size_t request_bytes(std::string_view tag, size_t ops_bytes) const;

  // Sends COMPOUND(TAG, OPS); OPS_BYTES is what OPS encode to. REPLY receives the results.
  // When OPS[0] is SEQUENCE and it succeeded, the slot's sequence id advances. Throws as
  // RpcTransport::call does.
  void call(std::string_view tag, std::span<nfs_argop4> ops, size_t ops_bytes, Reply &reply);

  size_t last_request_bytes() const { return rpc_ ? rpc_->last_request_bytes() : 0; }
  size_t last_reply_bytes() const { return rpc_ ? rpc_->last_reply_bytes() : 0; }

 private:
  void exchange_id();
  void create_session();
  void reclaim_complete();
  void read_export_limits();
  // call() for the setup steps: throws Error naming STEP when the COMPOUND fails.
  void setup_call(const std::string &step, std::span<nfs_argop4> ops, Reply &reply);

  ClientOptions options_;
  std::unique_ptr<RpcTransport> rpc_;
  std::vector<std::string> export_;
  std::string client_owner_;  // EXCHANGE_ID's co_ownerid: unique to this Client
  clientid4 clientid_ = 0;
  sequenceid4 create_seq_ = 0;  // from EXCHANGE_ID, for CREATE_SESSION
  sessionid4 sessionid_{};
  sequenceid4 slot_seq_ = 1;  // the next SEQUENCE's sequence id on slot 0
  bool have_session_ = false;
  size_t sequence_bytes_ = 0;
  SessionLimits limits_;
};

}  // namespace txnfs::nfs
