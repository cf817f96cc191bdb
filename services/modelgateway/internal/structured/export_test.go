package structured

// CompiledCacheCost is the schema text the compile cache keys, and its
// bound.
func CompiledCacheCost() (cost, bound int) {
	compiled.Lock()
	defer compiled.Unlock()
	return compiled.cache.Cost(), compiledCacheBytes
}
