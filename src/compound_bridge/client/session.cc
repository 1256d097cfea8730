#include "compound_bridge/client/session.h"

#include <unistd.h>

#include <atomic>
#include <cstring>
#include <random>

#include "compound_bridge/client/counting_xdr.h"
#include "compound_bridge/client/fattr.h"
#include "compound_bridge/client/nfs_names.h"
#include "compound_bridge/client/target.h"

namespace txnfs::nfs {
namespace {

constexpr uint32_t kMinorVersion = 1;
constexpr uint32_t kCallbackProgram = 0x40000000;  // no back channel is bound; any number
// The back channel is never used: the smallest attributes Ganesha accepts
// (NFS41_MIN_REQUEST_SIZE/RESPONSE_SIZE 256, NFS41_MIN_OPERATIONS 2).
constexpr channel_attrs4 kBackChannel = {0, 4096, 4096, 0, 2, 1, {0, nullptr}};
// Replies are never cached (sa_cachethis is false), so this only has to be acceptable.
constexpr uint32_t kMaxResponseCached = 64 * 1024;

// [tag, minorversion, number of operations, operations...]: COMPOUND4args.
bool encode_compound(XDR *xdrs, std::string_view tag, std::span<nfs_argop4> ops) {
  utf8str_cs t = xdr::utf8(tag);
  uint32_t minor = kMinorVersion;
  auto n = static_cast<uint32_t>(ops.size());
  if (!xdr_utf8str_cs(xdrs, &t) || !inline_xdr_u_int32_t(xdrs, &minor) ||
      !inline_xdr_u_int32_t(xdrs, &n)) {
    return false;
  }
  for (nfs_argop4 &op : ops) {
    if (!xdr_nfs_argop4(xdrs, &op)) return false;
  }
  return true;
}

// COMPOUND4res, with at most SENT results (a reply cannot have more than were sent).
bool decode_compound(XDR *xdrs, Reply &reply, size_t sent) {
  uint32_t n = 0;
  if (!xdr_nfsstat4(xdrs, &reply.status) || !xdr_utf8str_cs(xdrs, &reply.tag) ||
      !inline_xdr_u_int32_t(xdrs, &n) || n > sent) {
    return false;
  }
  reply.results.resize(n);  // zeroed: what the decoder allocates starts out null
  for (uint32_t i = 0; i < n; i++) {
    if (!xdr_nfs_resop4(xdrs, &reply.results[i])) {
      reply.results.resize(i + 1);  // free what this one got so far, and no more
      return false;
    }
  }
  return true;
}

// Distinct for every Client ever made, in any process on any host: a server treats two
// EXCHANGE_IDs with one owner as the same client.
std::string unique_owner() {
  static std::atomic<uint64_t> counter{0};
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  std::random_device rd;
  uint64_t nonce = static_cast<uint64_t>(rd()) << 32 | rd();
  return "txnfs-nfs/" + std::string(host) + "/" + std::to_string(getpid()) + "/" +
         std::to_string(counter.fetch_add(1)) + "/" + std::to_string(nonce);
}

size_t encoded_bytes(std::span<nfs_argop4> ops) {
  CountingXdr counter;
  for (nfs_argop4 &op : ops) xdr_nfs_argop4(counter.xdrs(), &op);
  return counter.bytes();
}

}  // namespace

void Reply::clear() {
  // xdr_free_null_stream is ntirpc's XDR_FREE stream: each decoder frees what it allocated.
  for (nfs_resop4 &res : results) xdr_nfs_resop4(&xdr_free_null_stream, &res);
  results.clear();
  xdr_utf8str_cs(&xdr_free_null_stream, &tag);
  tag = utf8str_cs{};
}

nfsstat4 result_status(const nfs_resop4 &res) {
  // Every NFSv4 result type (ACCESS4res ... ILLEGAL4res) begins with its nfsstat4.
  nfsstat4 status;
  std::memcpy(&status, &res.nfs_resop4_u, sizeof status);
  return status;
}

Session::Session(const ClientOptions &options) : options_(options), client_owner_(unique_owner()) {
  export_ = parse_target(options.export_path.empty() ? "/" : options.export_path).components;
  nfs_argop4 seq = sequence();
  sequence_bytes_ = encoded_bytes({&seq, 1});

  rpc_ = std::make_unique<RpcTransport>(options.server, options.port, options.timeout_ms);
  try {
    exchange_id();
    create_session();
    reclaim_complete();
    read_export_limits();
  } catch (...) {
    close();  // what the server already has of this client
    throw;
  }
}

Session::~Session() { close(); }

void Session::close() {
  if (!rpc_) return;
  try {
    Reply reply;
    if (have_session_) {
      nfs_argop4 op = xdr::op_of(NFS4_OP_DESTROY_SESSION);
      std::memcpy(op.nfs_argop4_u.opdestroy_session.dsa_sessionid, sessionid_, sizeof sessionid_);
      have_session_ = false;
      call("", {&op, 1}, encoded_bytes({&op, 1}), reply);
    }
    // Fails with NFS4ERR_CLIENTID_BUSY while a failed COMPOUND's OPEN is still open;
    // the server then drops that state when the lease expires.
    nfs_argop4 op = xdr::op_of(NFS4_OP_DESTROY_CLIENTID);
    op.nfs_argop4_u.opdestroy_clientid.dca_clientid = clientid_;
    call("", {&op, 1}, encoded_bytes({&op, 1}), reply);
  } catch (const Error &) {
    // Closing is best effort: the server expires what it keeps.
  }
  rpc_.reset();
}

nfs_argop4 Session::sequence() const {
  nfs_argop4 op = xdr::op_of(NFS4_OP_SEQUENCE);
  SEQUENCE4args &s = op.nfs_argop4_u.opsequence;
  std::memcpy(s.sa_sessionid, sessionid_, sizeof sessionid_);
  s.sa_sequenceid = slot_seq_;
  s.sa_slotid = 0;
  s.sa_highest_slotid = 0;
  s.sa_cachethis = false;
  return op;
}

size_t Session::request_bytes(std::string_view tag, size_t ops_bytes) const {
  CountingXdr counter;
  encode_compound(counter.xdrs(), tag, {});
  return rpc_->header_bytes() + counter.bytes() + ops_bytes;
}

void Session::call(std::string_view tag, std::span<nfs_argop4> ops, size_t ops_bytes,
                   Reply &reply) {
  if (!rpc_) throw Error("the client is closed");
  reply.clear();
  CountingXdr prefix;
  encode_compound(prefix.xdrs(), tag, {});
  rpc_->call(
      xdr::kProcCompound, prefix.bytes() + ops_bytes,
      [&](XDR *xdrs) { return encode_compound(xdrs, tag, ops); },
      [&](XDR *xdrs) { return decode_compound(xdrs, reply, ops.size()); });
  if (!ops.empty() && ops[0].argop == NFS4_OP_SEQUENCE && !reply.results.empty() &&
      result_status(reply.results[0]) == NFS4_OK) {
    slot_seq_++;
  }
}

void Session::setup_call(const std::string &step, std::span<nfs_argop4> ops, Reply &reply) {
  call("", ops, encoded_bytes(ops), reply);
  if (reply.status == NFS4_OK) return;
  std::string at;
  if (!reply.results.empty()) at = " at " + describe_op(ops[reply.results.size() - 1]);
  throw Error(step + ": " + status_name(reply.status) + at);
}

void Session::exchange_id() {
  nfs_argop4 op = xdr::op_of(NFS4_OP_EXCHANGE_ID);
  EXCHANGE_ID4args &e = op.nfs_argop4_u.opexchange_id;
  std::random_device rd;
  for (size_t i = 0; i < sizeof e.eia_clientowner.co_verifier; i++) {
    e.eia_clientowner.co_verifier[i] = static_cast<char>(rd());
  }
  e.eia_clientowner.co_ownerid.co_ownerid_len = static_cast<u_int>(client_owner_.size());
  e.eia_clientowner.co_ownerid.co_ownerid_val = client_owner_.data();
  e.eia_flags = EXCHGID4_FLAG_USE_NON_PNFS;
  e.eia_state_protect.spa_how = SP4_NONE;
  Reply reply;
  setup_call("EXCHANGE_ID", {&op, 1}, reply);
  const EXCHANGE_ID4resok &ok =
      reply.results[0].nfs_resop4_u.opexchange_id.EXCHANGE_ID4res_u.eir_resok4;
  clientid_ = ok.eir_clientid;
  create_seq_ = ok.eir_sequenceid;
}

void Session::create_session() {
  nfs_argop4 op = xdr::op_of(NFS4_OP_CREATE_SESSION);
  CREATE_SESSION4args &c = op.nfs_argop4_u.opcreate_session;
  c.csa_clientid = clientid_;
  c.csa_sequence = create_seq_;
  c.csa_flags = 0;
  c.csa_fore_chan_attrs = {
      0, options_.max_request, options_.max_response, kMaxResponseCached, options_.max_operations,
      1, {0, nullptr}};
  c.csa_back_chan_attrs = kBackChannel;
  c.csa_cb_program = kCallbackProgram;
  callback_sec_parms4 none{};
  none.cb_secflavor = AUTH_NONE;
  c.csa_sec_parms.csa_sec_parms_len = 1;
  c.csa_sec_parms.csa_sec_parms_val = &none;
  Reply reply;
  setup_call("CREATE_SESSION", {&op, 1}, reply);
  const CREATE_SESSION4resok &ok =
      reply.results[0].nfs_resop4_u.opcreate_session.CREATE_SESSION4res_u.csr_resok4;
  std::memcpy(sessionid_, ok.csr_sessionid, sizeof sessionid_);
  have_session_ = true;
  slot_seq_ = 1;
  limits_.max_request = ok.csr_fore_chan_attrs.ca_maxrequestsize;
  limits_.max_response = ok.csr_fore_chan_attrs.ca_maxresponsesize;
  limits_.max_operations = ok.csr_fore_chan_attrs.ca_maxoperations;
}

void Session::reclaim_complete() {
  nfs_argop4 ops[2] = {sequence(), xdr::op_of(NFS4_OP_RECLAIM_COMPLETE)};
  ops[1].nfs_argop4_u.opreclaim_complete.rca_one_fs = false;
  Reply reply;
  try {
    setup_call("RECLAIM_COMPLETE", ops, reply);
  } catch (const Error &) {
    // Already sent for this client id (a server restarted in grace) is fine.
    if (reply.status != NFS4ERR_COMPLETE_ALREADY) throw;
  }
}

void Session::read_export_limits() {
  std::vector<nfs_argop4> ops = {sequence(), xdr::op_of(NFS4_OP_PUTROOTFH)};
  for (const std::string &name : export_) {
    nfs_argop4 &op = ops.emplace_back(xdr::op_of(NFS4_OP_LOOKUP));
    op.nfs_argop4_u.oplookup.objname = xdr::utf8(name);
  }
  nfs_argop4 &getattr = ops.emplace_back(xdr::op_of(NFS4_OP_GETATTR));
  getattr.nfs_argop4_u.opgetattr.attr_request = io_limits_request();
  Reply reply;
  setup_call("export " + options_.export_path, ops, reply);
  const fattr4 &attrs =
      reply.results.back().nfs_resop4_u.opgetattr.GETATTR4res_u.resok4.obj_attributes;
  auto values = decode_attrs(attrs.attrmask, std::string_view(attrs.attr_vals.attrlist4_val,
                                                              attrs.attr_vals.attrlist4_len));
  if (!values || values->max_read == 0 || values->max_write == 0) {
    throw Error("the server sent no usable maxread/maxwrite for export " + options_.export_path);
  }
  limits_.max_read = values->max_read;
  limits_.max_write = values->max_write;
}

}  // namespace txnfs::nfs
