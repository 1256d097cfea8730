#include "compound_bridge/client/client_impl.h"
#include "compound_bridge/client/counting_xdr.h"
#include "compound_bridge/client/fattr.h"
#include "compound_bridge/client/nfs_names.h"
#include "compound_bridge/client/target.h"

namespace txnfs::nfs {
namespace {

size_t encoded_bytes(std::span<nfs_argop4> ops) {
  CountingXdr counter;
  for (nfs_argop4 &op : ops) xdr_nfs_argop4(counter.xdrs(), &op);
  return counter.bytes();
}

}  // namespace

Client::Client(const ClientOptions &options) : impl_(std::make_unique<Impl>(options)) {}

Client::~Client() = default;  // Session's destructor closes

void Client::close() { impl_->session.close(); }

const ClientOptions &Client::options() const { return impl_->session.options(); }

const SessionLimits &Client::limits() const { return impl_->session.limits(); }

std::vector<FsLocation> Client::fs_locations(std::string_view dir) {
  Session &s = impl_->session;
  Target t = parse_target(dir);
  std::vector<nfs_argop4> ops = {s.sequence()};
  if (t.fh.empty()) {
    ops.push_back(xdr::op_of(NFS4_OP_PUTROOTFH));
    for (const std::string &name : s.export_components()) {
      nfs_argop4 &op = ops.emplace_back(xdr::op_of(NFS4_OP_LOOKUP));
      op.nfs_argop4_u.oplookup.objname = xdr::utf8(name);
    }
  } else {
    nfs_argop4 &op = ops.emplace_back(xdr::op_of(NFS4_OP_PUTFH));
    op.nfs_argop4_u.opputfh.object = {static_cast<u_int>(t.fh.size()),
                                      reinterpret_cast<char *>(t.fh.data())};
  }
  for (const std::string &name : t.components) {
    nfs_argop4 &op = ops.emplace_back(xdr::op_of(NFS4_OP_LOOKUP));
    op.nfs_argop4_u.oplookup.objname = xdr::utf8(name);
  }
  nfs_argop4 &getattr = ops.emplace_back(xdr::op_of(NFS4_OP_GETATTR));
  getattr.nfs_argop4_u.opgetattr.attr_request = fs_locations_request();
  Reply reply;
  s.call("", ops, encoded_bytes(ops), reply);
  if (reply.status != NFS4_OK) {
    std::string at;
    if (!reply.results.empty()) at = " at " + describe_op(ops[reply.results.size() - 1]);
    throw Error("fs_locations of " + std::string(dir) + ": " + status_name(reply.status) + at);
  }
  const fattr4 &attrs =
      reply.results.back().nfs_resop4_u.opgetattr.GETATTR4res_u.resok4.obj_attributes;
  auto values = decode_attrs(attrs.attrmask, std::string_view(attrs.attr_vals.attrlist4_val,
                                                              attrs.attr_vals.attrlist4_len));
  if (!values) throw Error("the server sent malformed fs_locations for " + std::string(dir));
  return values->fs_locations;
}

CompoundResult Client::tag_only(std::string_view tag) {
  Session &s = impl_->session;
  nfs_argop4 ops[2] = {s.sequence(), xdr::op_of(NFS4_OP_PUTROOTFH)};
  Reply reply;
  s.call(tag, ops, encoded_bytes(ops), reply);
  CompoundResult r;
  r.tag = tag;
  r.status = reply.status;
  r.nfs_ops = 2;
  r.nfs_results = reply.results.size();
  if (reply.status != NFS4_OK && !reply.results.empty()) {
    r.failed_at = describe_op(ops[reply.results.size() - 1]);
  }
  r.request_bytes = s.last_request_bytes();
  r.reply_bytes = s.last_reply_bytes();
  return r;
}

}  // namespace txnfs::nfs
