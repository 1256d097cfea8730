#include "compound_bridge/client/nfs_names.h"

#include "compound_bridge/client/nfs_client.h"

namespace txnfs::nfs {

static_assert(kNfs4Ok == NFS4_OK && kNfs4ErrDelay == NFS4ERR_DELAY &&
              kNfs4ErrResource == NFS4ERR_RESOURCE && kNfs4ErrTooManyOps == NFS4ERR_TOO_MANY_OPS);

std::string status_name(uint32_t status) {
#define NAME(s) \
  case s:       \
    return #s;
  switch (static_cast<nfsstat4>(status)) {
    NAME(NFS4_OK)
    NAME(NFS4ERR_PERM)
    NAME(NFS4ERR_NOENT)
    NAME(NFS4ERR_IO)
    NAME(NFS4ERR_NXIO)
    NAME(NFS4ERR_ACCESS)
    NAME(NFS4ERR_EXIST)
    NAME(NFS4ERR_XDEV)
    NAME(NFS4ERR_NOTDIR)
    NAME(NFS4ERR_ISDIR)
    NAME(NFS4ERR_INVAL)
    NAME(NFS4ERR_FBIG)
    NAME(NFS4ERR_NOSPC)
    NAME(NFS4ERR_ROFS)
    NAME(NFS4ERR_MLINK)
    NAME(NFS4ERR_NAMETOOLONG)
    NAME(NFS4ERR_NOTEMPTY)
    NAME(NFS4ERR_DQUOT)
    NAME(NFS4ERR_STALE)
    NAME(NFS4ERR_BADHANDLE)
    NAME(NFS4ERR_BAD_COOKIE)
    NAME(NFS4ERR_NOTSUPP)
    NAME(NFS4ERR_TOOSMALL)
    NAME(NFS4ERR_SERVERFAULT)
    NAME(NFS4ERR_BADTYPE)
    NAME(NFS4ERR_DELAY)
    NAME(NFS4ERR_SAME)
    NAME(NFS4ERR_DENIED)
    NAME(NFS4ERR_EXPIRED)
    NAME(NFS4ERR_LOCKED)
    NAME(NFS4ERR_GRACE)
    NAME(NFS4ERR_FHEXPIRED)
    NAME(NFS4ERR_SHARE_DENIED)
    NAME(NFS4ERR_WRONGSEC)
    NAME(NFS4ERR_CLID_INUSE)
    NAME(NFS4ERR_RESOURCE)
    NAME(NFS4ERR_MOVED)
    NAME(NFS4ERR_NOFILEHANDLE)
    NAME(NFS4ERR_MINOR_VERS_MISMATCH)
    NAME(NFS4ERR_STALE_CLIENTID)
    NAME(NFS4ERR_STALE_STATEID)
    NAME(NFS4ERR_OLD_STATEID)
    NAME(NFS4ERR_BAD_STATEID)
    NAME(NFS4ERR_BAD_SEQID)
    NAME(NFS4ERR_NOT_SAME)
    NAME(NFS4ERR_LOCK_RANGE)
    NAME(NFS4ERR_SYMLINK)
    NAME(NFS4ERR_RESTOREFH)
    NAME(NFS4ERR_LEASE_MOVED)
    NAME(NFS4ERR_ATTRNOTSUPP)
    NAME(NFS4ERR_NO_GRACE)
    NAME(NFS4ERR_RECLAIM_BAD)
    NAME(NFS4ERR_RECLAIM_CONFLICT)
    NAME(NFS4ERR_BADXDR)
    NAME(NFS4ERR_LOCKS_HELD)
    NAME(NFS4ERR_OPENMODE)
    NAME(NFS4ERR_BADOWNER)
    NAME(NFS4ERR_BADCHAR)
    NAME(NFS4ERR_BADNAME)
    NAME(NFS4ERR_BAD_RANGE)
    NAME(NFS4ERR_LOCK_NOTSUPP)
    NAME(NFS4ERR_OP_ILLEGAL)
    NAME(NFS4ERR_DEADLOCK)
    NAME(NFS4ERR_FILE_OPEN)
    NAME(NFS4ERR_ADMIN_REVOKED)
    NAME(NFS4ERR_CB_PATH_DOWN)
    NAME(NFS4ERR_BADIOMODE)
    NAME(NFS4ERR_BADLAYOUT)
    NAME(NFS4ERR_BAD_SESSION_DIGEST)
    NAME(NFS4ERR_BADSESSION)
    NAME(NFS4ERR_BADSLOT)
    NAME(NFS4ERR_COMPLETE_ALREADY)
    NAME(NFS4ERR_CONN_NOT_BOUND_TO_SESSION)
    NAME(NFS4ERR_DELEG_ALREADY_WANTED)
    NAME(NFS4ERR_BACK_CHAN_BUSY)
    NAME(NFS4ERR_LAYOUTTRYLATER)
    NAME(NFS4ERR_LAYOUTUNAVAILABLE)
    NAME(NFS4ERR_NOMATCHING_LAYOUT)
    NAME(NFS4ERR_RECALLCONFLICT)
    NAME(NFS4ERR_UNKNOWN_LAYOUTTYPE)
    NAME(NFS4ERR_SEQ_MISORDERED)
    NAME(NFS4ERR_SEQUENCE_POS)
    NAME(NFS4ERR_REQ_TOO_BIG)
    NAME(NFS4ERR_REP_TOO_BIG)
    NAME(NFS4ERR_REP_TOO_BIG_TO_CACHE)
    NAME(NFS4ERR_RETRY_UNCACHED_REP)
    NAME(NFS4ERR_UNSAFE_COMPOUND)
    NAME(NFS4ERR_TOO_MANY_OPS)
    NAME(NFS4ERR_OP_NOT_IN_SESSION)
    NAME(NFS4ERR_HASH_ALG_UNSUPP)
    NAME(NFS4ERR_CLIENTID_BUSY)
    NAME(NFS4ERR_PNFS_IO_HOLE)
    NAME(NFS4ERR_SEQ_FALSE_RETRY)
    NAME(NFS4ERR_BAD_HIGH_SLOT)
    NAME(NFS4ERR_DEADSESSION)
    NAME(NFS4ERR_ENCR_ALG_UNSUPP)
    NAME(NFS4ERR_PNFS_NO_LAYOUT)
    NAME(NFS4ERR_NOT_ONLY_OP)
    NAME(NFS4ERR_WRONG_CRED)
    NAME(NFS4ERR_WRONG_TYPE)
    NAME(NFS4ERR_DIRDELEG_UNAVAIL)
    NAME(NFS4ERR_REJECT_DELEG)
    NAME(NFS4ERR_RETURNCONFLICT)
    NAME(NFS4ERR_DELEG_REVOKED)
    NAME(NFS4ERR_PARTNER_NOTSUPP)
    NAME(NFS4ERR_PARTNER_NO_AUTH)
    NAME(NFS4ERR_UNION_NOTSUPP)
    NAME(NFS4ERR_OFFLOAD_DENIED)
    NAME(NFS4ERR_WRONG_LFS)
    NAME(NFS4ERR_BADLABEL)
    NAME(NFS4ERR_OFFLOAD_NO_REQS)
    NAME(NFS4ERR_NOXATTR)
    NAME(NFS4ERR_XATTR2BIG)
    NAME(NFS4ERR_REPLAY)
  }
#undef NAME
  return "NFS4ERR_" + std::to_string(status);
}

std::string type_name(uint32_t type) {
  switch (type) {
    case NF4REG:
      return "reg";
    case NF4DIR:
      return "dir";
    case NF4BLK:
      return "blk";
    case NF4CHR:
      return "chr";
    case NF4LNK:
      return "lnk";
    case NF4SOCK:
      return "sock";
    case NF4FIFO:
      return "fifo";
    default:
      return std::to_string(type);
  }
}

std::string_view op_name(OpKind kind) {
  switch (kind) {
    case OpKind::kWrite:
      return "write";
    case OpKind::kRead:
      return "read";
    case OpKind::kMkdir:
      return "mkdir";
    case OpKind::kRemove:
      return "remove";
    case OpKind::kRename:
      return "rename";
    case OpKind::kLink:
      return "link";
    case OpKind::kSymlink:
      return "symlink";
    case OpKind::kSetattr:
      return "setattr";
    case OpKind::kGetattr:
      return "getattr";
    case OpKind::kReaddir:
      return "readdir";
    case OpKind::kGetfh:
      return "getfh";
  }
  return "?";
}

std::string nfs_op_name(nfs_opnum4 op) {
  switch (op) {
    case NFS4_OP_CLOSE:
      return "CLOSE";
    case NFS4_OP_CREATE:
      return "CREATE";
    case NFS4_OP_GETATTR:
      return "GETATTR";
    case NFS4_OP_GETFH:
      return "GETFH";
    case NFS4_OP_LINK:
      return "LINK";
    case NFS4_OP_LOOKUP:
      return "LOOKUP";
    case NFS4_OP_OPEN:
      return "OPEN";
    case NFS4_OP_PUTFH:
      return "PUTFH";
    case NFS4_OP_PUTROOTFH:
      return "PUTROOTFH";
    case NFS4_OP_READ:
      return "READ";
    case NFS4_OP_READDIR:
      return "READDIR";
    case NFS4_OP_REMOVE:
      return "REMOVE";
    case NFS4_OP_RENAME:
      return "RENAME";
    case NFS4_OP_SAVEFH:
      return "SAVEFH";
    case NFS4_OP_SETATTR:
      return "SETATTR";
    case NFS4_OP_WRITE:
      return "WRITE";
    case NFS4_OP_EXCHANGE_ID:
      return "EXCHANGE_ID";
    case NFS4_OP_CREATE_SESSION:
      return "CREATE_SESSION";
    case NFS4_OP_DESTROY_SESSION:
      return "DESTROY_SESSION";
    case NFS4_OP_DESTROY_CLIENTID:
      return "DESTROY_CLIENTID";
    case NFS4_OP_RECLAIM_COMPLETE:
      return "RECLAIM_COMPLETE";
    case NFS4_OP_SEQUENCE:
      return "SEQUENCE";
    case NFS4_OP_ILLEGAL:
      return "ILLEGAL";
    default:
      return "OP" + std::to_string(static_cast<int>(op));
  }
}

std::string describe_op(const nfs_argop4 &op) {
  std::string name = nfs_op_name(op.argop);
  auto with = [&](const utf8string &s) {
    return name + " " + std::string(s.utf8string_val, s.utf8string_len);
  };
  const auto &u = op.nfs_argop4_u;
  switch (op.argop) {
    case NFS4_OP_LOOKUP:
      return with(u.oplookup.objname);
    case NFS4_OP_REMOVE:
      return with(u.opremove.target);
    case NFS4_OP_CREATE:
      return with(u.opcreate.objname);
    case NFS4_OP_LINK:
      return with(u.oplink.newname);
    case NFS4_OP_RENAME:
      return with(u.oprename.oldname);
    case NFS4_OP_OPEN:
      return u.opopen.claim.claim == CLAIM_NULL ? with(u.opopen.claim.open_claim4_u.file) : name;
    default:
      return name;
  }
}

}  // namespace txnfs::nfs
