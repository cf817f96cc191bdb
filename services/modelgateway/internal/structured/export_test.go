package structured

// CompiledCacheLen is how many schemas the compile cache keeps, its bound,
// and the longest schema text it keeps.
func CompiledCacheLen() (n, bound, maxText int) {
	compiled.Lock()
	defer compiled.Unlock()
	return compiled.cache.Len(), compiledCacheEntries, compiledCacheMaxText
}

// CompiledCacheHas reports whether the compile cache keeps the schema raw
// named name.
func CompiledCacheHas(name string, raw []byte) bool {
	compiled.Lock()
	defer compiled.Unlock()
	_, ok := compiled.cache.Get(name + "\x00" + string(raw))
	return ok
}
