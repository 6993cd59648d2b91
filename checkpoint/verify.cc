#include "checkpoint/verify.h"

#include <algorithm>
#include <vector>

#include "checkpoint/checksum.h"
#include "checkpoint/format.h"
#include "checkpoint/meta_schema.h"
#include "checkpoint/posix_file.h"
#include "checkpoint/reader.h"
#include "framework/glob.h"
#include "fsdp/param_subset.h"

namespace shardema {

namespace {
// Streams one rank file and compares its digests with the manifest's.
Status VerifyFileContents(const std::string& path, const FileEntry& want, uint64_t chunk_bytes,
                          std::vector<char>& buf) {
  ASSIGN_OR_RETURN(std::unique_ptr<ReadableFile> f, ReadableFile::Open(path));
  ChunkedHash hash(chunk_bytes);
  for (uint64_t pos = 0; pos < want.bytes;) {
    const size_t n = size_t(std::min<uint64_t>(buf.size(), want.bytes - pos));
    RETURN_IF_ERROR(f->ReadAt(pos, n, buf.data()));
    hash.Update(buf.data(), n);
    pos += n;
  }
  hash.Finish();
  std::string problems;
  for (size_t c = 0; c < hash.chunks().size(); ++c) {
    if (hash.chunks()[c] != want.chunk_xxh3[c]) {
      const uint64_t b = c * chunk_bytes;
      problems += "\n  '" + path + "': chunk " + std::to_string(c) + " (bytes [" +
                  std::to_string(b) + ", " + std::to_string(std::min(b + chunk_bytes, want.bytes)) +
                  ")) checksum mismatch: the manifest says " + HashToHex(want.chunk_xxh3[c]) +
                  ", the data hashes to " + HashToHex(hash.chunks()[c]);
    }
  }
  if (hash.whole() != want.xxh3) {
    problems += "\n  '" + path + "': file checksum mismatch: the manifest says " +
                HashToHex(want.xxh3) + ", the data hashes to " + HashToHex(hash.whole());
  }
  if (!problems.empty()) return DataLoss(problems.substr(3));
  return Status::Ok();
}
// Every EMA slot with include/exclude patterns in the meta (rule 5) is stored as a subset slot
// whose "params" are what the patterns select from the layout, and vice versa.
Status CheckSubsetSlots(const Manifest& m, const std::string& where) {
  const JsonField root(m.meta, where, "meta");
  std::vector<EmaSlotSubset> subsets;
  if (root.Has("ema") && m.meta.at("ema").is_object() && m.meta.at("ema").contains("config")) {
    ASSIGN_OR_RETURN(JsonField ema, root.Get("ema"));
    ASSIGN_OR_RETURN(JsonField config, ema.Get("config"));
    if (config.Has("slots")) {
      ASSIGN_OR_RETURN(subsets, ParseEmaSubsets(config));
    }
  }
  const std::vector<std::string> names = LayoutParamNames(m.layout);
  // Frozen parameters (meta.store.config.frozen) are tracked by no slot.
  std::vector<std::string> frozen;
  const nlohmann::json* store = m.meta.contains("store") ? &m.meta.at("store") : nullptr;
  if (store != nullptr && store->is_object() && store->contains("config") &&
      store->at("config").is_object() && store->at("config").contains("frozen")) {
    ASSIGN_OR_RETURN(JsonField config, JsonField(m.meta, where, "meta").Get("store"));
    ASSIGN_OR_RETURN(config, config.Get("config"));
    ASSIGN_OR_RETURN(std::vector<JsonField> list, config.GetArray("frozen"));
    for (const JsonField& f : list) {
      ASSIGN_OR_RETURN(std::string name, f.String());
      frozen.push_back(std::move(name));
    }
  }
  for (const EmaSlotSubset& s : subsets) {
    const int i = m.FindSlot(s.name);
    if (i < 0) continue;  // a slot the checkpoint does not store (e.g. a snapshot's)
    const std::string what = where + ": EMA slot '" + s.name + "'";
    StatusOr<std::vector<bool>> mask = SelectByGlobs(names, s.include, s.exclude, what);
    if (!mask.ok()) return DataLoss(mask.status().message());
    std::vector<std::string> want;
    for (size_t p = 0; p < names.size(); ++p) {
      if ((*mask)[p] && std::find(frozen.begin(), frozen.end(), names[p]) == frozen.end()) {
        want.push_back(names[p]);
      }
    }
    if (m.slots[size_t(i)].params != want) {
      return DataLoss(what, ": its include/exclude patterns select ", want.size(),
                      " parameter(s) but the manifest's slots[", i, "].params lists ",
                      m.slots[size_t(i)].params.size());
    }
  }
  return Status::Ok();
}
}  // namespace

StatusOr<VerifiedCheckpoint> VerifyCheckpoint(const std::string& path) {
  ASSIGN_OR_RETURN(std::unique_ptr<CheckpointReader> reader,
                   CheckpointReader::Open(path, ReaderOptions{1}));
  const Manifest& m = reader->manifest();
  VerifiedCheckpoint out;
  out.dir = reader->dir();
  out.step = m.step;
  out.world_size = m.world_size;
  std::vector<char> buf(size_t(8) << 20);
  std::vector<Status> problems;
  Status meta = CheckMetaSchema(m.meta, "manifest '" + JoinPath(out.dir, kManifestName) + "'");
  if (meta.ok()) meta = CheckSubsetSlots(m, "manifest '" + JoinPath(out.dir, kManifestName) + "'");
  if (!meta.ok()) problems.push_back(meta);
  for (int r = 0; r < m.world_size; ++r) {
    Status s = reader->CheckFile(r);
    if (s.ok()) s = VerifyFileContents(reader->FilePath(r), m.files[size_t(r)], m.chunk_bytes, buf);
    if (s.ok()) out.bytes += m.files[size_t(r)].bytes;
    if (!s.ok()) problems.push_back(s);
  }
  if (problems.empty()) return out;
  std::string msg = "checkpoint '" + out.dir + "' failed verification:";
  for (const Status& s : problems) msg += "\n  " + s.message();
  // One missing file and nothing else reads as kNotFound; anything else is data loss.
  const StatusCode code = problems.size() == 1 ? problems[0].code() : StatusCode::kDataLoss;
  return Status(code, msg);
}

}  // namespace shardema
