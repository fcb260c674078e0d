// The dashboard's files as compiled into the binary: the table embedded_assets.cc
// (generated at build time by embed_assets.cmake from ui/) defines. Use ServeAsset.
#pragma once

#include <cstddef>

namespace bulwark::ui::internal {

struct EmbeddedAsset {
  const char* name;  // served as "/" + name, e.g. "app.js"
  const unsigned char* data;
  size_t size;
};

extern const EmbeddedAsset kEmbeddedAssets[];
extern const size_t kEmbeddedAssetCount;

}  // namespace bulwark::ui::internal
