#include "cluster/decisions.h"

#include <cerrno>
#include <optional>

#include "cluster/cluster_conf.h"

namespace txnfs::cluster {
namespace {

int parse(const std::string &key, const std::string &value, Decision *out, std::string *why) {
  if (value == "commit") {
    *out = Decision::kCommit;
  } else if (value == "abort") {
    *out = Decision::kAbort;
  } else {
    if (why) *why = "etcd: " + key + " holds `" + value + "`, not commit or abort";
    return EIO;
  }
  return 0;
}

int bad_gid(const std::string &gid, std::string *why) {
  if (why) *why = "not a global transaction id: `" + gid + "`";
  return EINVAL;
}

}  // namespace

const char *name(Decision d) {
  switch (d) {
    case Decision::kCommit:
      return "commit";
    case Decision::kAbort:
      return "abort";
    case Decision::kNone:
      break;
  }
  return "none";
}

Decisions::Decisions(Etcd &etcd, std::string cluster)
    : etcd_(etcd), prefix_("/txnfs/" + cluster + "/decisions/") {}

int Decisions::read(const std::string &gid, Decision *out, std::string *why) {
  if (!valid_gid(gid)) return bad_gid(gid, why);
  std::optional<std::string> value;
  if (int err = etcd_.get(key(gid), &value, why)) return err;
  if (!value) {
    *out = Decision::kNone;
    return 0;
  }
  return parse(key(gid), *value, out, why);
}

int Decisions::decide(const std::string &gid, Decision want, Decision *final, std::string *why) {
  if (!valid_gid(gid)) return bad_gid(gid, why);
  if (want == Decision::kNone) {
    if (why) *why = "decide: the decision must be commit or abort";
    return EINVAL;
  }
  std::string stored;
  bool created = false;
  if (int err = etcd_.put_if_absent(key(gid), name(want), &stored, &created, why)) return err;
  return parse(key(gid), stored, final, why);
}

}  // namespace txnfs::cluster
