// fattr4 values: the attributes the client sets (SetAttrs -> attribute mask + XDR
// values) and the ones it reads back (GETATTR's mask + values -> AttrValues). Only the
// attributes listed here; values are encoded in increasing attribute number, as fattr4
// requires.
#pragma once
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "compound_bridge/client/nfs4_xdr.h"
#include "compound_bridge/client/nfs_client.h"

namespace txnfs::nfs {

struct EncodedAttrs {
  bitmap4 mask{};
  std::string values;  // the attrlist4 bytes
};

// size, mode, owner, owner_group (numeric strings), time_access_set, time_modify_set.
EncodedAttrs encode_attrs(const SetAttrs &attrs);

// What GETATTR asks for: every FileAttrs field; the export's READ/WRITE limits.
bitmap4 file_attrs_request();
bitmap4 io_limits_request();
// A directory's fs_locations (where a referral lives).
bitmap4 fs_locations_request();

struct AttrValues {
  FileAttrs file;
  uint64_t max_read = 0;
  uint64_t max_write = 0;
  std::vector<FsLocation> fs_locations;  // rootpath "/" + components joined by "/"
};

// Reads VALUES in the order of MASK. nullopt if they are malformed or MASK has an
// attribute not requested by one of the requests above.
std::optional<AttrValues> decode_attrs(const bitmap4 &mask, std::string_view values);

}  // namespace txnfs::nfs
