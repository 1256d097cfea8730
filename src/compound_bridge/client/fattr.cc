#include "compound_bridge/client/fattr.h"

#include <initializer_list>

namespace txnfs::nfs {
namespace {

void set_bit(bitmap4 &mask, uint32_t attr) {
  uint32_t word = attr / 32;
  mask.map[word] |= 1u << (attr % 32);
  if (mask.bitmap4_len < word + 1) mask.bitmap4_len = word + 1;
}

bitmap4 mask_of(std::initializer_list<uint32_t> attrs) {
  bitmap4 mask{};
  for (uint32_t a : attrs) set_bit(mask, a);
  return mask;
}

// Big-endian XDR writer/reader for the inside of an attrlist4.
struct Writer {
  std::string out;
  void u32(uint32_t v) {
    for (int shift = 24; shift >= 0; shift -= 8) out += static_cast<char>(v >> shift);
  }
  void u64(uint64_t v) {
    u32(static_cast<uint32_t>(v >> 32));
    u32(static_cast<uint32_t>(v));
  }
  void str(std::string_view s) {
    u32(static_cast<uint32_t>(s.size()));
    out += s;
    out.append((4 - s.size() % 4) % 4, '\0');
  }
  void settime(const SetTime &t) {
    if (t.server_time) {
      u32(SET_TO_SERVER_TIME4);
      return;
    }
    u32(SET_TO_CLIENT_TIME4);
    u64(static_cast<uint64_t>(t.time.sec));
    u32(t.time.nsec);
  }
};

struct Reader {
  std::string_view in;
  bool ok = true;
  uint32_t u32() {
    if (in.size() < 4) {
      ok = false;
      return 0;
    }
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) v = v << 8 | static_cast<uint8_t>(in[i]);
    in.remove_prefix(4);
    return v;
  }
  uint64_t u64() {
    uint64_t hi = u32();
    return hi << 32 | u32();
  }
  std::string str() {
    uint32_t len = u32();
    size_t padded = (static_cast<size_t>(len) + 3) & ~size_t{3};
    if (!ok || in.size() < padded) {
      ok = false;
      return {};
    }
    std::string s(in.substr(0, len));
    in.remove_prefix(padded);
    return s;
  }
  // pathname4: its components, joined as "/a/b" ("/" for none).
  std::string pathname() {
    uint32_t n = u32();
    if (!ok || n > in.size() / 4) {
      ok = false;
      return {};
    }
    std::string path;
    for (uint32_t i = 0; i < n && ok; i++) path += "/" + str();
    return path.empty() ? "/" : path;
  }
  // fs_locations4: fs_root, then each fs_location4 (servers, rootpath).
  std::vector<FsLocation> fs_locations() {
    pathname();  // fs_root: the referral's own path on this server
    uint32_t n = u32();
    if (!ok || n > in.size() / 8) {
      ok = false;
      return {};
    }
    std::vector<FsLocation> locations(n);
    for (FsLocation &l : locations) {
      uint32_t servers = u32();
      if (!ok || servers > in.size() / 4) {
        ok = false;
        return {};
      }
      for (uint32_t i = 0; i < servers && ok; i++) l.servers.push_back(str());
      l.rootpath = pathname();
    }
    return locations;
  }
  Time time() {
    Time t;
    t.sec = static_cast<int64_t>(u64());
    t.nsec = u32();
    return t;
  }
};

}  // namespace

EncodedAttrs encode_attrs(const SetAttrs &attrs) {
  EncodedAttrs e;
  Writer w;
  if (attrs.size) {
    set_bit(e.mask, FATTR4_SIZE);
    w.u64(*attrs.size);
  }
  if (attrs.mode) {
    set_bit(e.mask, FATTR4_MODE);
    w.u32(*attrs.mode);
  }
  if (attrs.uid) {
    set_bit(e.mask, FATTR4_OWNER);
    w.str(std::to_string(*attrs.uid));
  }
  if (attrs.gid) {
    set_bit(e.mask, FATTR4_OWNER_GROUP);
    w.str(std::to_string(*attrs.gid));
  }
  if (attrs.atime) {
    set_bit(e.mask, FATTR4_TIME_ACCESS_SET);
    w.settime(*attrs.atime);
  }
  if (attrs.mtime) {
    set_bit(e.mask, FATTR4_TIME_MODIFY_SET);
    w.settime(*attrs.mtime);
  }
  e.values = std::move(w.out);
  return e;
}

bitmap4 file_attrs_request() {
  return mask_of({FATTR4_TYPE, FATTR4_CHANGE, FATTR4_SIZE, FATTR4_FILEID, FATTR4_MODE,
                  FATTR4_NUMLINKS, FATTR4_OWNER, FATTR4_OWNER_GROUP, FATTR4_TIME_ACCESS,
                  FATTR4_TIME_MODIFY});
}

bitmap4 io_limits_request() { return mask_of({FATTR4_MAXREAD, FATTR4_MAXWRITE}); }

bitmap4 fs_locations_request() { return mask_of({FATTR4_FS_LOCATIONS}); }

std::optional<AttrValues> decode_attrs(const bitmap4 &mask, std::string_view values) {
  AttrValues v;
  Reader r{values};
  for (uint32_t attr = 0; attr < 32 * mask.bitmap4_len; attr++) {
    if (!(mask.map[attr / 32] & (1u << (attr % 32)))) continue;
    switch (attr) {
      case FATTR4_TYPE:
        v.file.type = r.u32();
        break;
      case FATTR4_CHANGE:
        v.file.change = r.u64();
        break;
      case FATTR4_SIZE:
        v.file.size = r.u64();
        break;
      case FATTR4_FILEID:
        v.file.fileid = r.u64();
        break;
      case FATTR4_FS_LOCATIONS:
        v.fs_locations = r.fs_locations();
        break;
      case FATTR4_MAXREAD:
        v.max_read = r.u64();
        break;
      case FATTR4_MAXWRITE:
        v.max_write = r.u64();
        break;
      case FATTR4_MODE:
        v.file.mode = r.u32();
        break;
      case FATTR4_NUMLINKS:
        v.file.nlink = r.u32();
        break;
      case FATTR4_OWNER:
        v.file.owner = r.str();
        break;
      case FATTR4_OWNER_GROUP:
        v.file.group = r.str();
        break;
      case FATTR4_TIME_ACCESS:
        v.file.atime = r.time();
        break;
      case FATTR4_TIME_MODIFY:
        v.file.mtime = r.time();
        break;
      default:
        return std::nullopt;  // not asked for: its length is unknown here
    }
    if (!r.ok) return std::nullopt;
  }
  if (!r.in.empty()) return std::nullopt;
  return v;
}

}  // namespace txnfs::nfs
