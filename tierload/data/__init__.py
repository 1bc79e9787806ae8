"""The data model: blocks, packs, the manifest, the seeded epoch order, and the layouts that cut
samples out of blocks."""
