// The object tier of the checkpoint engine: committed checkpoints on S3.
//
// Layout: under S3Config::prefix, the same keys and bytes as a file tier
// (checkpoint.h):
//   step-<012d>/shard-<05d>-of-<05d>.bws   uploaded from a file tier, byte-identical
//   step-<012d>/MANIFEST                   the file tier's MANIFEST bytes
//   step-<012d>/COMMIT                     the file tier's COMMIT bytes, PUT last
// A step is committed on the object tier iff COMMIT and MANIFEST decode and match
// exactly as on a file tier (internal::DecodeCommit / DecodeManifest) and every shard
// the MANIFEST lists exists with its recorded size. Anything else is skipped with a
// reason and never downloaded. S3 is strongly consistent (read-after-write, list).
//
// Flow: WriteShard + ckpt::Commit on a file tier, then UploadShard per rank, then
// Commit here; Retain like a file tier; Download to bring a committed step (and the
// steps its chunks reference) back into a file tier for StepReader.
//
// Thread-safety: every method may be called concurrently (S3Client is thread-safe
// and ObjectTier holds no other mutable state). As on a file tier, Retain racing a
// Commit of an older step, and two Downloads of one step into one file root, are the
// caller's to avoid.
//
// Errors: FAILED_PRECONDITION when a prerequisite is missing (step not committed on
// the file tier, shard not uploaded, dependency not committed on the object tier);
// NOT_FOUND when a step has no COMMIT; DATA_LOSS when bytes do not verify; S3 errors
// as objstore/s3.h maps them (UNAVAILABLE, DEADLINE_EXCEEDED, ...). Messages name the
// step and the s3:// key or local path, and what to do.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "ckpt/checkpoint.h"
#include "ckpt/env.h"
#include "common/status.h"
#include "objstore/s3.h"

namespace bulwark::ckpt {

class ObjectTier {
 public:
  // Creates the S3 client (S3Client::Create validates cfg). No I/O; the bucket must
  // exist. `env` is used for every file-tier access (nullptr: Env::Default()); not
  // owned, must outlive the tier.
  static Result<std::unique_ptr<ObjectTier>> Open(objstore::S3Config cfg, Env* env = nullptr);
  // Same, from "s3://bucket[/prefix][?endpoint=URL&region=R&path_style=B]"
  // (objstore::ParseS3Url); credentials from AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY.
  static Result<std::unique_ptr<ObjectTier>> OpenUrl(const std::string& url, Env* env = nullptr);
  ~ObjectTier();
  ObjectTier(const ObjectTier&) = delete;
  ObjectTier& operator=(const ObjectTier&) = delete;

  // The client (bucket creation, tests, metrics).
  objstore::S3Client* client() const;
  // "s3://bucket/prefix/<key>", as errors name objects.
  std::string Url(const std::string& key) const;

  // Uploads rank's shard of `step` from file tier `file_root` after checking its
  // structure (header, index, footer, size; chunk data is not read). Removes the
  // step's COMMIT then MANIFEST on the object tier first, so re-uploading a shard of a
  // committed step uncommits it until Commit runs again. Multipart above part_size.
  Status UploadShard(const std::string& file_root, long step, int rank, int world);

  // Commits `step` on the object tier: requires it committed on `file_root`
  // (ckpt::ReadCommitted), every shard its MANIFEST lists present on S3 with the
  // recorded size (one List of the step's prefix), and every `depends` step committed
  // on the object tier. Then PUTs MANIFEST, then COMMIT: the file tier's exact bytes.
  Status Commit(const std::string& file_root, long step);

  // COMMIT -> MANIFEST verified, every shard present with its size.
  Result<Manifest> ReadCommitted(long step);
  // Committed steps, ascending (one List of the tier, then COMMIT and MANIFEST GETs
  // per step). With `skipped`, one reason per uncommitted step prefix is appended.
  Result<std::vector<long>> ListCommitted(std::vector<std::string>* skipped = nullptr);
  // Newest committed step <= max_step (-1: any); -1 if none.
  Result<long> NewestCommitted(long max_step = -1);

  // Every step prefix on the tier, ascending, with its MANIFEST when committed or why
  // it is not (status NOT_FOUND: no COMMIT; DATA_LOSS: does not verify). One List,
  // then COMMIT and MANIFEST GETs per step. Other errors fail the whole call.
  struct StepState {
    long step = 0;
    Status status;      // OK: committed
    Manifest manifest;  // when committed
  };
  Result<std::vector<StepState>> Scan();

  // ckpt::Retain's policy (PlanRetain) on the object tier: deletes committed steps
  // outside {newest keep} ∪ golden ∪ their dependency closure, and uncommitted step
  // prefixes older than the newest committed step; never the newest committed step or
  // anything newer. Steps go newest first; in each, COMMIT is deleted before any other
  // object, so an interrupted Retain leaves the step uncommitted (the next Retain
  // removes it). `removed` (optional) gets the removed steps, ascending.
  Status Retain(const RetainOptions& opts, std::vector<long>* removed = nullptr);

  // Downloads committed `step` and every step of its dependency closure (oldest first)
  // into file tier `file_root`, skipping steps already committed there with the same
  // shards (sizes and index xxh3s; a committed local step with different shards is
  // FAILED_PRECONDITION). Per step: any local COMMIT/MANIFEST is removed, shards are
  // fetched (GetToFile: tmp, fsync, rename; then the directory is fsynced), each shard's
  // structure, size, index xxh3 and every local chunk is verified against the MANIFEST,
  // and only then MANIFEST and COMMIT are written (WriteFileAtomic). Finally
  // ckpt::VerifyStep(full) checks `step` with references resolved. On failure the
  // failing step's directory is removed, so no COMMIT is left for a partial or corrupt
  // step (DATA_LOSS for corrupt bytes); dependencies completed before stay committed.
  Status Download(long step, const std::string& file_root);

 private:
  struct Impl;
  explicit ObjectTier(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace bulwark::ckpt
