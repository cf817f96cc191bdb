//go:build !amd64

package vector

// useAVX2 is false off amd64: the portable inner product is used.
const useAVX2 = false

func dotAVX2(a, b *float32, n int) float32 { panic("vector: no AVX2 on this architecture") }

func dot8AVX2(a, b *int8, n int) int32 { panic("vector: no AVX2 on this architecture") }
