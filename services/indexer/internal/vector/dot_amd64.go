package vector

import "golang.org/x/sys/cpu"

// useAVX2 selects the assembly inner product.
var useAVX2 = cpu.X86.HasAVX2 && cpu.X86.HasFMA

// dotAVX2 returns the inner product of the n float32 values at a and b,
// using 256-bit fused multiply-adds. n must be positive.
//
//go:noescape
func dotAVX2(a, b *float32, n int) float32

// dot8AVX2 returns the inner product of the n int8 values at a and b.
// n must be a positive multiple of 16.
//
//go:noescape
func dot8AVX2(a, b *int8, n int) int32
