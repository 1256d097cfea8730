// Compound: each operation appends its NFS operations to one argument array, whose
// element 0 is SEQUENCE; execute() sends the array as it is and maps the results back.
//
// Invariants:
//  - args_bytes is exactly what args encode to (each op is counted as it is appended),
//    so request_bytes() is the size of the call without building it.
//  - every pointer in args points into strings/handles (deques: stable addresses) or at
//    caller data that the API says must outlive execute().
//  - planned[i] owns args[first, first+count); with the checks' ranges (checks[j]:
//    args[first, components.back().end)) they are consecutive, starting at 1.
#include <deque>
#include <functional>

#include "compound_bridge/client/client_impl.h"
#include "compound_bridge/client/counting_xdr.h"
#include "compound_bridge/client/fattr.h"
#include "compound_bridge/client/nfs_names.h"
#include "compound_bridge/client/target.h"

namespace txnfs::nfs {
namespace {

// The stateid the previous operation of the COMPOUND produced (RFC 8881 16.2.3.1.2).
constexpr stateid4 kCurrentStateid = {1, {}};
// The anonymous stateid: SETATTR outside any OPEN.
constexpr stateid4 kAnonymousStateid = {0, {}};

// Whether OP may change the file system (and so must not run twice).
bool changes_files(const nfs_argop4 &op) {
  switch (op.argop) {
    case NFS4_OP_OPEN:
      return op.nfs_argop4_u.opopen.openhow.opentype == OPEN4_CREATE;
    case NFS4_OP_WRITE:
    case NFS4_OP_CREATE:
    case NFS4_OP_REMOVE:
    case NFS4_OP_RENAME:
    case NFS4_OP_LINK:
    case NFS4_OP_SETATTR:
      return true;
    default:
      return false;
  }
}

}  // namespace

struct Compound::Impl {
  struct Planned {
    OpKind kind;
    std::string path, path2;
    size_t first = 0, count = 0;  // its NFS operations: args[first, first+count)
    size_t end_bytes = 0;         // args_bytes once it was added
    uint64_t requested = 0;
  };

  explicit Impl(Session &s) : session(&s) {
    args.push_back(session->sequence());  // a placeholder of the same size
    args_bytes = session->sequence_bytes();
  }

  // Appends one operation: BUILD appends its NFS operations. All or nothing.
  void add(OpKind kind, std::string_view path, std::string_view path2,
           const std::function<void(Planned &)> &build) {
    Planned p{kind, std::string(path), std::string(path2), args.size()};
    size_t bytes_before = args_bytes;
    try {
      build(p);
    } catch (...) {
      args.resize(p.first);
      args_bytes = bytes_before;
      throw;
    }
    p.count = args.size() - p.first;
    p.end_bytes = args_bytes;
    planned.push_back(std::move(p));
  }

  void push(nfs_argop4 op) {
    CountingXdr counter;
    if (!xdr_nfs_argop4(counter.xdrs(), &op)) {
      throw Error("cannot encode " + describe_op(op) + ": an argument is too long");
    }
    args_bytes += counter.bytes();
    args.push_back(op);
  }

  utf8string keep(std::string_view s) { return xdr::utf8(strings.emplace_back(s)); }

  // PUTROOTFH and LOOKUPs of the export, or PUTFH; then LOOKUPs of T's first N components.
  void go_to(const Target &t, size_t n) {
    if (t.fh.empty()) {
      push(xdr::op_of(NFS4_OP_PUTROOTFH));
      for (const std::string &name : session->export_components()) lookup(name);
    } else {
      std::vector<uint8_t> &fh = handles.emplace_back(t.fh);
      nfs_argop4 op = xdr::op_of(NFS4_OP_PUTFH);
      op.nfs_argop4_u.opputfh.object = {static_cast<u_int>(fh.size()),
                                        reinterpret_cast<char *>(fh.data())};
      push(op);
    }
    for (size_t i = 0; i < n; i++) lookup(t.components[i]);
  }

  // go_to() the file T names.
  void go_to(const Target &t) { go_to(t, t.components.size()); }

  void lookup(std::string_view name) {
    nfs_argop4 op = xdr::op_of(NFS4_OP_LOOKUP);
    op.nfs_argop4_u.oplookup.objname = keep(name);
    push(op);
  }

  // Goes to the directory holding T's last component and returns that name.
  utf8string go_to_parent(const Target &t) {
    go_to(t, t.components.size() - 1);
    return keep(t.components.back());
  }

  fattr4 attrs(const SetAttrs &a) {
    EncodedAttrs e = encode_attrs(a);
    utf8string values = keep(e.values);
    return fattr4{e.mask, {values.utf8string_len, values.utf8string_val}};
  }

  nfs_argop4 open(uint32_t access) {
    nfs_argop4 op = xdr::op_of(NFS4_OP_OPEN);
    OPEN4args &o = op.nfs_argop4_u.opopen;
    o.seqid = 0;  // ignored in NFSv4.1
    o.share_access = access | OPEN4_SHARE_ACCESS_WANT_NO_DELEG;
    o.share_deny = OPEN4_SHARE_DENY_NONE;
    o.owner.clientid = session->clientid();
    std::string_view owner = Session::kOpenOwner;
    o.owner.owner = {static_cast<u_int>(owner.size()), const_cast<char *>(owner.data())};
    o.openhow.opentype = OPEN4_NOCREATE;
    o.claim.claim = CLAIM_FH;  // the current file handle
    return op;
  }

  void close() {
    nfs_argop4 op = xdr::op_of(NFS4_OP_CLOSE);
    op.nfs_argop4_u.opclose.open_stateid = kCurrentStateid;
    push(op);
  }

  // A check_referrals() walk: args[first, components.back().end). components[i] ends
  // with the GETFH of the path's first i+1 components, `dir`.
  struct Check {
    struct Component {
      size_t end;
      std::string dir;
    };
    size_t first = 0;
    std::vector<Component> components;
    // The directory where a failure at args[index] stopped the walk: the component
    // whose LOOKUP or GETFH it was, "/" for the PUTROOTFH (or PUTFH) and export LOOKUPs.
    std::string dir_at(size_t index) const {
      for (const Component &c : components) {
        if (index < c.end) return index + 2 >= c.end ? c.dir : std::string("/");
      }
      return "/";
    }
  };

  Session *session;
  std::vector<nfs_argop4> args;     // [0]: SEQUENCE, filled in by execute()
  size_t args_bytes = 0;            // what args encode to
  std::deque<std::string> strings;  // bytes args point to
  std::deque<std::vector<uint8_t>> handles;
  std::vector<Planned> planned;
  std::vector<Check> checks;
};

namespace {

// Target of an operation that creates, removes or renames a name: it must have one.
Target named_target(std::string_view path, OpKind kind) {
  Target t = parse_target(path);
  if (t.components.empty()) {
    throw Error(std::string(op_name(kind)) + " " + std::string(path) +
                ": needs a name below a directory (PATH, or fh:HEX/NAME)");
  }
  return t;
}

}  // namespace

Compound::Compound(Client &client) : impl_(std::make_unique<Impl>(client.impl_->session)) {}
Compound::~Compound() = default;
Compound::Compound(Compound &&) noexcept = default;
Compound &Compound::operator=(Compound &&) noexcept = default;

void Compound::write(std::string_view path, std::string_view data, const WriteOptions &options) {
  Target t = parse_target(path);
  Impl &m = *impl_;
  m.add(OpKind::kWrite, path, {}, [&](Impl::Planned &p) {
    if (!t.components.empty()) {
      // OPEN(create) truncates an existing file through the size=0 attribute.
      utf8string name = m.go_to_parent(t);
      nfs_argop4 op = m.open(OPEN4_SHARE_ACCESS_WRITE);
      OPEN4args &o = op.nfs_argop4_u.opopen;
      o.openhow.opentype = OPEN4_CREATE;
      createhow4 &how = o.openhow.openflag4_u.how;
      how.mode = UNCHECKED4;
      how.createhow4_u.createattrs = m.attrs({.mode = options.mode, .size = 0});
      o.claim.claim = CLAIM_NULL;
      o.claim.open_claim4_u.file = name;
      m.push(op);
    } else {  // fh:HEX: an existing file, opened by handle and truncated
      m.go_to(t, 0);
      m.push(m.open(OPEN4_SHARE_ACCESS_WRITE));
      nfs_argop4 op = xdr::op_of(NFS4_OP_SETATTR);
      op.nfs_argop4_u.opsetattr.stateid = kCurrentStateid;
      op.nfs_argop4_u.opsetattr.obj_attributes = m.attrs({.size = 0});
      m.push(op);
    }
    size_t chunk = m.session->limits().max_write;
    for (size_t off = 0; off < data.size(); off += chunk) {
      size_t len = std::min(chunk, data.size() - off);
      nfs_argop4 op = xdr::op_of(NFS4_OP_WRITE);
      WRITE4args &w = op.nfs_argop4_u.opwrite;
      w.stateid = kCurrentStateid;
      w.offset = off;
      w.stable = options.stable ? FILE_SYNC4 : UNSTABLE4;
      w.data = {static_cast<u_int>(len), const_cast<char *>(data.data() + off)};
      m.push(op);
    }
    m.close();
    p.requested = data.size();
  });
}

void Compound::read(std::string_view path, uint32_t max_bytes) {
  Target t = parse_target(path);
  Impl &m = *impl_;
  m.add(OpKind::kRead, path, {}, [&](Impl::Planned &p) {
    m.go_to(t);
    m.push(m.open(OPEN4_SHARE_ACCESS_READ));
    nfs_argop4 getattr = xdr::op_of(NFS4_OP_GETATTR);
    getattr.nfs_argop4_u.opgetattr.attr_request = file_attrs_request();
    m.push(getattr);
    uint64_t chunk = m.session->limits().max_read;
    for (uint64_t off = 0; off < max_bytes; off += chunk) {
      nfs_argop4 op = xdr::op_of(NFS4_OP_READ);
      op.nfs_argop4_u.opread = {kCurrentStateid, off,
                                static_cast<count4>(std::min<uint64_t>(chunk, max_bytes - off))};
      m.push(op);
    }
    m.close();
    p.requested = max_bytes;
  });
}

void Compound::mkdir(std::string_view path, uint32_t mode) {
  Target t = named_target(path, OpKind::kMkdir);
  Impl &m = *impl_;
  m.add(OpKind::kMkdir, path, {}, [&](Impl::Planned &) {
    utf8string name = m.go_to_parent(t);
    nfs_argop4 op = xdr::op_of(NFS4_OP_CREATE);
    CREATE4args &c = op.nfs_argop4_u.opcreate;
    c.objtype.type = NF4DIR;
    c.objname = name;
    c.createattrs = m.attrs({.mode = mode});
    m.push(op);
  });
}

void Compound::remove(std::string_view path) {
  Target t = named_target(path, OpKind::kRemove);
  Impl &m = *impl_;
  m.add(OpKind::kRemove, path, {}, [&](Impl::Planned &) {
    utf8string name = m.go_to_parent(t);
    nfs_argop4 op = xdr::op_of(NFS4_OP_REMOVE);
    op.nfs_argop4_u.opremove.target = name;
    m.push(op);
  });
}

void Compound::rename(std::string_view from, std::string_view to) {
  Target f = named_target(from, OpKind::kRename);
  Target t = named_target(to, OpKind::kRename);
  Impl &m = *impl_;
  m.add(OpKind::kRename, from, to, [&](Impl::Planned &) {
    utf8string oldname = m.go_to_parent(f);
    m.push(xdr::op_of(NFS4_OP_SAVEFH));
    utf8string newname = m.go_to_parent(t);
    nfs_argop4 op = xdr::op_of(NFS4_OP_RENAME);
    op.nfs_argop4_u.oprename = {oldname, newname};
    m.push(op);
  });
}

void Compound::link(std::string_view existing, std::string_view new_path) {
  Target e = parse_target(existing);
  Target n = named_target(new_path, OpKind::kLink);
  Impl &m = *impl_;
  m.add(OpKind::kLink, existing, new_path, [&](Impl::Planned &) {
    m.go_to(e);
    m.push(xdr::op_of(NFS4_OP_SAVEFH));
    utf8string name = m.go_to_parent(n);
    nfs_argop4 op = xdr::op_of(NFS4_OP_LINK);
    op.nfs_argop4_u.oplink.newname = name;
    m.push(op);
  });
}

void Compound::symlink(std::string_view target, std::string_view path) {
  Target t = named_target(path, OpKind::kSymlink);
  Impl &m = *impl_;
  m.add(OpKind::kSymlink, target, path, [&](Impl::Planned &) {
    utf8string name = m.go_to_parent(t);
    nfs_argop4 op = xdr::op_of(NFS4_OP_CREATE);
    CREATE4args &c = op.nfs_argop4_u.opcreate;
    c.objtype.type = NF4LNK;
    c.objtype.createtype4_u.linkdata = m.keep(target);
    c.objname = name;
    c.createattrs = m.attrs({});
    m.push(op);
  });
}

void Compound::setattr(std::string_view path, const SetAttrs &attrs) {
  if (attrs.empty()) throw Error("setattr " + std::string(path) + ": no attribute to set");
  Target t = parse_target(path);
  Impl &m = *impl_;
  m.add(OpKind::kSetattr, path, {}, [&](Impl::Planned &) {
    m.go_to(t);
    nfs_argop4 op = xdr::op_of(NFS4_OP_SETATTR);
    op.nfs_argop4_u.opsetattr.stateid = kAnonymousStateid;
    op.nfs_argop4_u.opsetattr.obj_attributes = m.attrs(attrs);
    m.push(op);
  });
}

void Compound::getattr(std::string_view path) {
  Target t = parse_target(path);
  Impl &m = *impl_;
  m.add(OpKind::kGetattr, path, {}, [&](Impl::Planned &) {
    m.go_to(t);
    nfs_argop4 op = xdr::op_of(NFS4_OP_GETATTR);
    op.nfs_argop4_u.opgetattr.attr_request = file_attrs_request();
    m.push(op);
  });
}

void Compound::readdir(std::string_view path, uint32_t max_bytes) {
  Target t = parse_target(path);
  Impl &m = *impl_;
  m.add(OpKind::kReaddir, path, {}, [&](Impl::Planned &p) {
    m.go_to(t);
    nfs_argop4 op = xdr::op_of(NFS4_OP_READDIR);
    READDIR4args &r = op.nfs_argop4_u.opreaddir;
    r.cookie = 0;
    r.dircount = max_bytes;
    r.maxcount = max_bytes;
    r.attr_request = bitmap4{};  // names only
    m.push(op);
    p.requested = max_bytes;
  });
}

void Compound::getfh(std::string_view path) {
  Target t = parse_target(path);
  Impl &m = *impl_;
  m.add(OpKind::kGetfh, path, {}, [&](Impl::Planned &) {
    m.go_to(t);
    m.push(xdr::op_of(NFS4_OP_GETFH));
  });
}

void Compound::add(const Operation &op) {
  switch (op.kind) {
    case OpKind::kWrite:
      write(op.path, op.data, {.mode = op.mode, .stable = op.stable});
      break;
    case OpKind::kRead:
      read(op.path, op.count);
      break;
    case OpKind::kMkdir:
      mkdir(op.path, op.mode);
      break;
    case OpKind::kRemove:
      remove(op.path);
      break;
    case OpKind::kRename:
      rename(op.path, op.path2);
      break;
    case OpKind::kLink:
      link(op.path, op.path2);
      break;
    case OpKind::kSymlink:
      symlink(op.path, op.path2);
      break;
    case OpKind::kSetattr:
      setattr(op.path, op.attrs);
      break;
    case OpKind::kGetattr:
      getattr(op.path);
      break;
    case OpKind::kReaddir:
      readdir(op.path, op.count);
      break;
    case OpKind::kGetfh:
      getfh(op.path);
      break;
  }
}

void Compound::check_referrals(std::string_view dir) {
  Target t = parse_target(dir);
  if (t.components.empty()) return;
  Impl &m = *impl_;
  Impl::Check check{m.args.size(), {}};
  size_t bytes_before = m.args_bytes;
  try {
    m.go_to(t, 0);
    std::string prefix = t.fh.empty() ? "" : "fh:" + to_hex(t.fh);
    for (const std::string &name : t.components) {
      prefix += "/" + name;
      m.lookup(name);
      m.push(xdr::op_of(NFS4_OP_GETFH));  // NFS4ERR_MOVED on a referral
      check.components.push_back({m.args.size(), prefix});
    }
  } catch (...) {
    m.args.resize(check.first);
    m.args_bytes = bytes_before;
    throw;
  }
  m.checks.push_back(std::move(check));
}

size_t Compound::size() const { return impl_->planned.size(); }

size_t Compound::nfs_ops() const { return impl_->args.size(); }

size_t Compound::request_bytes(std::string_view tag) const {
  return impl_->session->request_bytes(tag, impl_->args_bytes);
}

Fit Compound::fit(std::string_view tag) const {
  const Impl &m = *impl_;
  const SessionLimits &limits = m.session->limits();
  Fit f;
  f.request_bytes = request_bytes(tag);
  f.max_request = limits.max_request;
  f.nfs_ops = m.args.size();
  f.max_operations = limits.max_operations;
  f.fits = f.request_bytes <= f.max_request && f.nfs_ops <= f.max_operations;
  size_t base = m.session->request_bytes(tag, 0);  // header, tag, count: no operation
  for (const Impl::Planned &p : m.planned) {
    if (base + p.end_bytes > f.max_request || p.first + p.count > f.max_operations) break;
    f.ops_that_fit++;
  }
  return f;
}

namespace {

// Adds what the successful result RES carries to OUT.
void collect(const nfs_resop4 &res, OpResult &out) {
  const auto &u = res.nfs_resop4_u;
  switch (res.resop) {
    case NFS4_OP_WRITE: {
      const WRITE4resok &ok = u.opwrite.WRITE4res_u.resok4;
      out.bytes += ok.count;
      out.verifier.assign(ok.writeverf, sizeof ok.writeverf);
      break;
    }
    case NFS4_OP_READ: {
      const READ4resok &ok = u.opread.READ4res_u.resok4;
      out.data.append(ok.data.data_val, ok.data.data_len);
      out.bytes = out.data.size();
      out.eof = ok.eof;
      break;
    }
    case NFS4_OP_GETATTR: {
      const fattr4 &a = u.opgetattr.GETATTR4res_u.resok4.obj_attributes;
      auto values = decode_attrs(
          a.attrmask, std::string_view(a.attr_vals.attrlist4_val, a.attr_vals.attrlist4_len));
      if (!values) throw Error("the server sent malformed attributes");
      out.attrs = values->file;
      break;
    }
    case NFS4_OP_READDIR: {
      const dirlist4 &list = u.opreaddir.READDIR4res_u.resok4.reply;
      for (const entry4 *e = list.entries; e != nullptr; e = e->nextentry) {
        out.names.emplace_back(e->name.utf8string_val, e->name.utf8string_len);
      }
      out.eof = list.eof;
      break;
    }
    case NFS4_OP_GETFH: {
      const nfs_fh4 &fh = u.opgetfh.GETFH4res_u.resok4.object;
      out.fh.assign(fh.nfs_fh4_val, fh.nfs_fh4_val + fh.nfs_fh4_len);
      break;
    }
    default:
      break;
  }
}

}  // namespace

CompoundResult Compound::execute(std::string_view tag) {
  Impl &m = *impl_;
  m.args[0] = m.session->sequence();
  Reply reply;
  m.session->call(tag, m.args, m.args_bytes, reply);

  CompoundResult r;
  r.tag = tag;
  r.status = reply.status;
  r.nfs_ops = m.args.size();
  r.nfs_results = reply.results.size();
  r.request_bytes = m.session->last_request_bytes();
  r.reply_bytes = m.session->last_reply_bytes();
  const size_t n = reply.results.size();
  // A failed COMPOUND's last result is the operation that failed; none means the server
  // refused the COMPOUND as a whole.
  const bool failed = reply.status != NFS4_OK;
  const size_t failed_index = failed && n > 0 ? n - 1 : n;
  if (failed && n > 0) r.failed_at = describe_op(m.args[failed_index]);
  if (failed && n > 0) {
    for (const Impl::Check &c : m.checks) {
      if (failed_index >= c.first && failed_index < c.components.back().end) {
        r.check_dir = c.dir_at(failed_index);
      }
    }
  }
  if (failed) {
    for (size_t i = 1; i < failed_index; i++) {
      r.changed_before_failure = r.changed_before_failure || changes_files(m.args[i]);
    }
  }

  r.ops.reserve(m.planned.size());
  for (const Impl::Planned &p : m.planned) {
    OpResult &o = r.ops.emplace_back();
    o.kind = p.kind;
    o.path = p.path;
    o.path2 = p.path2;
    o.requested = p.requested;
    size_t end = p.first + p.count;
    if (p.first >= n) continue;  // not run
    for (size_t i = p.first; i < std::min(end, failed_index); i++) collect(reply.results[i], o);
    if (failed_index < end) {
      o.state = OpResult::State::kFailed;
      o.status = result_status(reply.results[failed_index]);
      o.failed_at = r.failed_at;
    } else if (end > n) {  // cut short without a failing result: only a broken server
      o.state = OpResult::State::kFailed;
      o.status = reply.status;
    } else {
      o.state = OpResult::State::kOk;
    }
  }
  return r;
}

}  // namespace txnfs::nfs
