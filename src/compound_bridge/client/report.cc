#include "compound_bridge/client/report.h"

#include <fmt/format.h>

#include "compound_bridge/client/content.h"
#include "compound_bridge/client/target.h"

namespace txnfs::nfs::cli {
namespace {

// Ganesha 4.3 answers a COMPOUND of more than NFS4_MAX_OPERATIONS (sal_data.h) operations
// with NFS4ERR_RESOURCE and no result, whatever ca_maxoperations CREATE_SESSION granted;
// one of more than XDR_ARRAY_MAXLEN (gsh_rpc.h) it cannot even decode (GARBAGE_ARGS).
constexpr size_t kGaneshaMaxOperations = 100;
constexpr size_t kGaneshaMaxDecodedOperations = 1024;

std::string time_text(const Time &t) { return fmt::format("{}.{:09}", t.sec, t.nsec); }

std::string paths(const OpResult &op) {
  return op.path2.empty() ? op.path : op.path + " " + op.path2;
}

nlohmann::ordered_json attrs_json(const FileAttrs &a) {
  return {{"type", type_name(a.type)},
          {"mode", fmt::format("{:04o}", a.mode)},
          {"size", a.size},
          {"nlink", a.nlink},
          {"owner", a.owner},
          {"group", a.group},
          {"atime", time_text(a.atime)},
          {"mtime", time_text(a.mtime)},
          {"change", a.change},
          {"fileid", a.fileid}};
}

}  // namespace

std::string op_status(const OpResult &op) {
  switch (op.state) {
    case OpResult::State::kOk:
      return "ok";
    case OpResult::State::kFailed:
      return status_name(op.status);
    case OpResult::State::kNotRun:
      return "not run";
  }
  return "?";
}

std::string incomplete(const OpResult &op, bool whole_file) {
  if (op.state != OpResult::State::kOk) return "";
  if (op.kind == OpKind::kWrite && op.bytes != op.requested) {
    return fmt::format("write {}: the server took {} of {} bytes", op.path, op.bytes, op.requested);
  }
  if (op.kind == OpKind::kRead && whole_file && !op.eof && op.attrs && op.bytes < op.attrs->size) {
    return fmt::format("read {}: got the first {} of {} bytes; give --count (or --read-max)",
                       op.path, op.bytes, op.attrs->size);
  }
  return "";
}

std::string op_line(const OpResult &op) {
  std::string line = op_status(op) + " " + std::string(op_name(op.kind)) + " " + paths(op);
  if (op.state == OpResult::State::kFailed) {
    if (!op.failed_at.empty()) line += " (at " + op.failed_at + ")";
    return line;
  }
  if (op.state != OpResult::State::kOk) return line;
  switch (op.kind) {
    case OpKind::kWrite:
      line += fmt::format(" {} bytes", op.bytes);
      if (op.bytes != op.requested) line += fmt::format(" (short write: {} asked)", op.requested);
      break;
    case OpKind::kRead:
      line += fmt::format(" {} bytes crc32={:08x} {}", op.bytes, crc32(op.data),
                          op.eof ? "eof" : "more");
      if (op.attrs) line += fmt::format(" size={}", op.attrs->size);
      break;
    case OpKind::kGetattr: {
      const FileAttrs &a = *op.attrs;
      line += fmt::format(
          " type={} mode={:04o} size={} nlink={} uid={} gid={} atime={} mtime={} change={} "
          "fileid={}",
          type_name(a.type), a.mode, a.size, a.nlink, a.owner, a.group, time_text(a.atime),
          time_text(a.mtime), a.change, a.fileid);
      break;
    }
    case OpKind::kReaddir:
      line += fmt::format(" {} entries {}", op.names.size(), op.eof ? "eof" : "more");
      break;
    case OpKind::kGetfh:
      line += " fh:" + to_hex(op.fh);
      break;
    default:
      break;
  }
  return line;
}

void print_ops(std::ostream &out, const CompoundResult &r) {
  for (const OpResult &op : r.ops) {
    out << op_line(op) << '\n';
    if (op.state == OpResult::State::kOk) {
      for (const std::string &name : op.names) out << "  " << name << '\n';
    }
  }
}

std::string compound_line(const CompoundResult &r, const RunInfo &info, const std::string &where) {
  std::string status = status_name(r.status);
  if (!r.failed_at.empty()) status += " at " + r.failed_at;
  return fmt::format(
      "compound {}: {}tag={} ops={} nfs_ops={} request_bytes={} reply_bytes={} retries={} "
      "time={:.3f}ms",
      status, where.empty() ? "" : where + " ", r.tag.empty() ? "''" : r.tag, r.ops.size(),
      r.nfs_ops, r.request_bytes, r.reply_bytes, info.retries, info.elapsed_ms);
}

void print_text(std::ostream &out, const CompoundResult &r, const RunInfo &info) {
  print_ops(out, r);
  out << compound_line(r, info) << '\n';
}

nlohmann::ordered_json ops_json(const CompoundResult &r) {
  nlohmann::ordered_json ops = nlohmann::ordered_json::array();
  for (const OpResult &op : r.ops) {
    nlohmann::ordered_json j = {{"op", op_name(op.kind)}, {"path", op.path}};
    if (!op.path2.empty()) j["path2"] = op.path2;
    j["status"] = op.state == OpResult::State::kOk ? status_name(kNfs4Ok) : op_status(op);
    if (op.state == OpResult::State::kFailed) j["failed_at"] = op.failed_at;
    if (op.state == OpResult::State::kOk) {
      switch (op.kind) {
        case OpKind::kWrite:
          j["bytes"] = op.bytes;
          j["requested"] = op.requested;
          break;
        case OpKind::kRead:
          j["bytes"] = op.bytes;
          j["crc32"] = fmt::format("{:08x}", crc32(op.data));
          j["eof"] = op.eof;
          if (op.attrs) j["size"] = op.attrs->size;
          break;
        case OpKind::kGetattr:
          j["attrs"] = attrs_json(*op.attrs);
          break;
        case OpKind::kReaddir:
          j["names"] = op.names;
          j["eof"] = op.eof;
          break;
        case OpKind::kGetfh:
          j["fh"] = to_hex(op.fh);
          break;
        default:
          break;
      }
    }
    ops.push_back(std::move(j));
  }
  return ops;
}

nlohmann::ordered_json to_json(const CompoundResult &r, const RunInfo &info) {
  nlohmann::ordered_json j = {{"status", status_name(r.status)},
                              {"tag", r.tag},
                              {"ops", ops_json(r)},
                              {"nfs_ops", r.nfs_ops},
                              {"nfs_results", r.nfs_results},
                              {"request_bytes", r.request_bytes},
                              {"reply_bytes", r.reply_bytes},
                              {"retries", info.retries},
                              {"time_ms", info.elapsed_ms}};
  if (!r.failed_at.empty()) j["failed_at"] = r.failed_at;
  return j;
}

std::string fit_message(const Fit &fit, size_t ops) {
  std::string why;
  if (fit.nfs_ops > fit.max_operations) {
    why = fmt::format("{} NFS operations (the session allows {})", fit.nfs_ops, fit.max_operations);
  }
  if (fit.request_bytes > fit.max_request) {
    why += fmt::format("{}{} request bytes (the session allows {})", why.empty() ? "" : ", ",
                       fit.request_bytes, fit.max_request);
  }
  return fmt::format("the COMPOUND does not fit: {}; the first {} of its {} operations fit", why,
                     fit.ops_that_fit, ops);
}

nlohmann::ordered_json fit_json(const Fit &fit, size_t ops) {
  return {{"status", "does not fit"},
          {"ops", ops},
          {"ops_that_fit", fit.ops_that_fit},
          {"nfs_ops", fit.nfs_ops},
          {"max_operations", fit.max_operations},
          {"request_bytes", fit.request_bytes},
          {"max_request", fit.max_request}};
}

std::string refusal_hint(const CompoundResult &r) {
  bool too_many = r.status == kNfs4ErrTooManyOps;  // v4.1: more than the server takes
  if ((r.status != kNfs4ErrResource && !too_many) || r.nfs_results != 0) return "";
  std::string hint = "the server refused the COMPOUND as a whole (no operation ran)";
  if (too_many) {
    hint += fmt::format("; it takes fewer operations per COMPOUND than this one's {}", r.nfs_ops);
  } else if (r.nfs_ops > kGaneshaMaxOperations) {
    hint += fmt::format(
        "; NFS-Ganesha 4.3 takes at most {} operations per COMPOUND (NFS4_MAX_OPERATIONS) "
        "whatever the session granted, and this one has {}",
        kGaneshaMaxOperations, r.nfs_ops);
  }
  return hint;
}

std::string garbage_args_hint(size_t nfs_ops) {
  if (nfs_ops <= kGaneshaMaxDecodedOperations) return "";
  return fmt::format(
      "NFS-Ganesha 4.3 decodes at most {} operations per COMPOUND (XDR_ARRAY_MAXLEN), and "
      "this one has {}",
      kGaneshaMaxDecodedOperations, nfs_ops);
}

}  // namespace txnfs::nfs::cli
