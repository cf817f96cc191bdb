package vector

import "math"

// dot returns the inner product of a and b, which must have the same length.
// It is the index's hot path (over 80% of insert and search time), so on
// amd64 with AVX2 and FMA it runs in assembly (dot_amd64.s).
func dot(a, b []float32) float32 {
	if useAVX2 && len(a) > 0 {
		_ = b[len(a)-1]
		return dotAVX2(&a[0], &b[0], len(a))
	}
	return dotGeneric(a, b)
}

// dotGeneric is the portable inner product. Eight independent accumulators
// let the CPU overlap the multiply-adds; the sub-slicing lets the compiler
// drop the bounds checks in the loop.
func dotGeneric(a, b []float32) float32 {
	n := len(a)
	b = b[:n]
	var s0, s1, s2, s3, s4, s5, s6, s7 float32
	i := 0
	for ; i+8 <= n; i += 8 {
		x := a[i : i+8 : i+8]
		y := b[i : i+8 : i+8]
		s0 += x[0] * y[0]
		s1 += x[1] * y[1]
		s2 += x[2] * y[2]
		s3 += x[3] * y[3]
		s4 += x[4] * y[4]
		s5 += x[5] * y[5]
		s6 += x[6] * y[6]
		s7 += x[7] * y[7]
	}
	for ; i < n; i++ {
		s0 += a[i] * b[i]
	}
	return (s0 + s1) + (s2 + s3) + (s4 + s5) + (s6 + s7)
}

// Normalize scales v in place to unit length and reports whether it could
// (a zero or non-finite vector cannot be normalised).
func Normalize(v []float32) bool {
	var s float64
	for _, x := range v {
		s += float64(x) * float64(x)
	}
	if s == 0 || math.IsNaN(s) || math.IsInf(s, 0) {
		return false
	}
	inv := float32(1 / math.Sqrt(s))
	for i := range v {
		v[i] *= inv
	}
	return true
}

// quantize writes v as int8 codes scaled by its largest magnitude and
// returns the scale (v[i] ≈ code[i] * scale).
func quantize(v []float32, code []int8) float32 {
	var m float32
	for _, x := range v {
		m = max(m, x, -x)
	}
	if m == 0 {
		clear(code)
		return 0
	}
	scale := m / 127
	inv := 1 / scale
	for i, x := range v {
		code[i] = int8(math.Round(float64(x * inv)))
	}
	return scale
}

// dot8 returns the inner product of two int8 vectors of the same length;
// the assembly handles whole blocks of 16.
func dot8(a, b []int8) int32 {
	n := len(a)
	b = b[:n]
	var s int32
	m := 0
	if useAVX2 {
		m = n &^ 15
		if m > 0 {
			s = dot8AVX2(&a[0], &b[0], m)
		}
	}
	for i := m; i < n; i++ {
		s += int32(a[i]) * int32(b[i])
	}
	return s
}
